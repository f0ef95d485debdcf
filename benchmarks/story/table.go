package story

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// WriteMarkdown writes the outcome table of r, a row per story and mode:
// lost updates, stale writes accepted and rejected, time blocked, verdict;
// then a line per skipped mode with the reason.
func WriteMarkdown(w io.Writer, r *Report) error {
	var b strings.Builder
	b.WriteString("| story | mode | lost updates | stale accepted | stale rejected | blocked | verdict |\n")
	b.WriteString("| --- | --- | ---: | ---: | ---: | ---: | --- |\n")
	for _, res := range r.Results {
		if res.Err != "" {
			fmt.Fprintf(&b, "| %s | %s | – | – | – | – | ERROR: %s |\n", res.Story, res.Mode, cell(res.Err))
			continue
		}
		o := res.Outcome
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %v | %s |\n", res.Story, res.Mode,
			o.LostUpdates, o.StaleAccepted, o.StaleRejected, o.Blocked.Round(10*time.Millisecond), cell(res.Verdict))
	}
	for _, sk := range r.Skipped {
		fmt.Fprintf(&b, "\nskipped mode %s: %s\n", sk.Mode, sk.Reason)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// cell makes s safe in a markdown table cell.
func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}
