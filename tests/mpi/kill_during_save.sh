#!/bin/sh
# A rank killed with SIGKILL in the middle of a save: the job ends (mpirun fails), and a new
# job restores the previous checkpoint. Usage: kill_during_save.sh MPIEXEC PROGRAM
set -eu
mpiexec=$1
program=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
if "$mpiexec" --oversubscribe --timeout 60 -np 2 "$program" save "$dir"; then
  echo "kill_during_save: the job whose rank was killed succeeded" >&2
  exit 1
fi
"$mpiexec" --oversubscribe --timeout 60 -np 2 "$program" restart "$dir"
echo "kill_during_save: the killed save ended the job; the restart restored step 1"
