#!/bin/bash
# count-lines.sh [REV...]: the hand-written non-test lines of trainer/, torch/ and
# cgotorch/ (.go, .cc, .h; generated *_gen.* files and *_test.go excluded) at each
# revision, or in the working tree when none is given. "all" counts every line; "code"
# leaves out blank lines and lines that are only a // comment. Issue 39 reports these.
#   count-lines.sh --net COMMIT...   the lines each commit added net to those files, and the sum
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
if [ "${1:-}" = --net ]; then
  shift
  sum=0
  for c in "$@"; do
    n=$(git show --numstat --format= "$c" -- trainer torch cgotorch | { grep -E '\.(go|cc|h)$' || true; } |
      { grep -Ev '_test\.go$|_gen\.' || true; } | awk '{n += $1 - $2} END {print n + 0}')
    printf '%+6d %s\n' "$n" "$(git log -1 --format='%h %s' "$c" | cut -c1-90)"
    sum=$((sum + n))
  done
  printf '%+6d in all\n' "$sum"
  exit 0
fi
count() { # rev dir
  local rev=$1 d=$2 all=0 code=0 f c
  local files
  if [ -n "$rev" ]; then files=$(git ls-tree -r --name-only "$rev" -- "$d"); else files=$(git ls-files -co --exclude-standard -- "$d"); fi
  for f in $(printf '%s\n' "$files" | grep -E '\.(go|cc|h)$' | grep -Ev '_test\.go$|_gen\.' || true); do
    if [ -n "$rev" ]; then c=$(git show "$rev:$f"); else [ -f "$f" ] || continue; c=$(cat "$f"); fi
    all=$((all + $(printf '%s\n' "$c" | wc -l)))
    code=$((code + $(printf '%s\n' "$c" | grep -Evc '^[[:space:]]*($|//)' || true)))
  done
  printf '%-9s %7d %7d\n' "$d" "$all" "$code"
  tall=$((tall + all)); tcode=$((tcode + code))
}
for rev in "${@:-}"; do
  echo "${rev:-working tree}:      all    code"
  tall=0; tcode=0
  for d in trainer torch cgotorch; do count "$rev" "$d"; done
  printf '%-9s %7d %7d\n' total "$tall" "$tcode"
done
