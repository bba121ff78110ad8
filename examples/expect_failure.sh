#!/bin/sh
# expect_failure.sh TEXT PROGRAM [ARGS...]: passes when PROGRAM exits non-zero and its output
# (stdout and stderr) contains TEXT; shows the output either way.
text=$1
shift
output=$("$@" 2>&1)
status=$?
printf '%s\n' "$output"
if [ "$status" -eq 0 ]; then
  echo "expected a failure, got exit status 0" >&2
  exit 1
fi
case $output in
*"$text"*) exit 0 ;;
*) echo "expected the output to say: $text" >&2; exit 1 ;;
esac
