package migrate_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestGuideQuotesTheCode: every function docs/migrate.md shows is copied
// from this package, unchanged, so that the guide shows code that
// compiles and passes these tests.
func TestGuideQuotesTheCode(t *testing.T) {
	guide, err := os.ReadFile("../../docs/migrate.md")
	if err != nil {
		t.Fatal(err)
	}
	funcs := regexp.MustCompile(`(?ms)^func (\w+)\(.*?^}$`)
	quoted := 0
	for _, file := range []string{"buy.go", "redis.go", "postgres.go", "etcd.go"} {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range funcs.FindAllStringSubmatch(string(src), -1) {
			name := m[1]
			if name[0] < 'A' || name[0] > 'Z' {
				continue
			}
			if !strings.Contains(string(guide), m[0]) {
				t.Errorf("docs/migrate.md does not quote %s (%s) as it is in the code", name, file)
			}
			quoted++
		}
	}
	if quoted < 6 {
		t.Fatalf("found only %d exported functions to check", quoted)
	}
}
