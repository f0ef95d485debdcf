#!/usr/bin/env bash
# House rules that keep the tree readable (run by scripts/lint.sh):
#   - no issue numbers in the comments of non-test Go files ("issue 12",
#     "#12"): history goes in commit messages, reasons in comments;
#   - no non-test Go file over 500 lines: a file that grows past it holds
#     several ideas, one file each.
set -euo pipefail
cd "$(dirname "$0")/.."

status=0
files=$(git ls-files '*.go' 2>/dev/null | grep -v '_test\.go$' || true)

# "issue 12", "Issue 7's goals", "(issue 9)": this project's issues. A
# reference to another project's tracker carries its name and a "#"
# ("etcd issue #22082"), which the pattern leaves alone.
hits=$(grep -nE '//.*\b[Ii]ssues? [0-9]+' $files 2>/dev/null || true)
if [ -n "$hits" ]; then
  echo "house: issue numbers in non-test comments (say why, not which issue):" >&2
  echo "$hits" >&2
  status=1
fi

# "#12", "Issue #7", "see issue #12": this project's tracker too. A "#"
# number in a comment must follow the name of the project whose tracker it
# is ("etcd issue #22082", "pgx PR #1234"); trackers named so far are the
# list below: add a project to it when a comment cites its tracker.
trackers='etcd|pgx|go|golang|redis|go-redis|mariadb|mysql|postgres|postgresql|dynalite|minidyn|aws-sdk-go-v2|gorm|porcupine|staticcheck|backoff|zookeeper'
hits=$(grep -nE '(^|[[:space:]])//.*#[0-9]+' $files 2>/dev/null |
  sed -E "s/\b($trackers) (issue|PR|pull request) #[0-9]+//gI" |
  grep -E '//.*#[0-9]+' || true)
if [ -n "$hits" ]; then
  echo "house: '#N' tracker references in non-test comments (name the project: \"etcd issue #N\"):" >&2
  echo "$hits" >&2
  status=1
fi

for f in $files; do
  n=$(wc -l <"$f")
  if [ "$n" -gt 500 ]; then
    echo "house: $f has $n lines, more than 500: split it by idea (one idea per file)" >&2
    status=1
  fi
done
exit "$status"
