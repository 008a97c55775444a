#!/usr/bin/env bash
# Fails when the git repository it runs in tracks a build output: a file over 1 MiB, or an
# executable binary (an ELF, Mach-O or PE header), whatever its name. Build outputs belong under
# bin/ (ignored); a compiled binary committed by mistake bloats every clone forever.
#
#   hack/check-tracked-files.sh [DIR]     (DIR defaults to the current directory)
set -euo pipefail
cd "${1:-.}"
limit=$((1024 * 1024))
bad=0
while IFS= read -r -d '' f; do
  [ -f "$f" ] && [ ! -L "$f" ] || continue
  size=$(stat -c %s -- "$f")
  if [ "$size" -gt "$limit" ]; then
    echo "tracked file $f is $size bytes (over 1 MiB): build outputs go under bin/, data files are kept small" >&2
    bad=1
    continue
  fi
  magic=$(head -c 4 -- "$f" | od -An -tx1 | tr -d ' \n')
  case "$magic" in
    7f454c46) kind=ELF ;;
    feedface | feedfacf | cefaedfe | cffaedfe | cafebabe | bebafeca) kind=Mach-O ;;
    4d5a*)
      # "MZ" starts some text too; a PE image has "PE\0\0" where the 32-bit value at 0x3c
      # points.
      off=$(od -An -tu4 -j 60 -N 4 -- "$f" 2>/dev/null | tr -d ' ' || true)
      if [ -n "$off" ] && [ "$off" -lt "$size" ] &&
        [ "$(od -An -tx1 -j "$off" -N 4 -- "$f" 2>/dev/null | tr -d ' \n' || true)" = 50450000 ]; then
        kind=PE
      else
        continue
      fi
      ;;
    *) continue ;;
  esac
  echo "tracked file $f is an executable binary ($kind): build outputs go under bin/ and are never committed" >&2
  bad=1
done < <(git ls-files -z)
if [ "$bad" != 0 ]; then
  echo "remove them with git rm --cached, and ignore their paths in .gitignore" >&2
  exit 1
fi
