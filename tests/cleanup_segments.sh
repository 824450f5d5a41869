#!/bin/sh
# Segments of the tests (names "shmio-test.*"), around a ctest run (fixture shm_cleanup).
#   cleanup_segments.sh before [TOOL]: removes what an earlier, crashed run left (only files no
#     process holds, with TOOL: a run beside this one keeps its own).
#   cleanup_segments.sh after [TOOL]: a file of the tests that no process holds any more is a
#     leak, of the library or of a test: it is removed and listed, and this fails. Then the rest
#     of the tests' names go (a crashed run's), and this user's abandoned temporary files.
# TOOL: the shmio command-line tool; without it nothing is checked and everything is removed.
# Two runs of the tests by one user at once share these names: run one at a time.
set -u
when=$1
tool=${2:-}
uid=$(id -u)
status=0
if [ -n "$tool" ] && [ ! -x "$tool" ]; then
  echo "no inspector at $tool (build the shmio_cli target): nothing checked"
  tool=""
fi
if [ -n "$tool" ]; then
  out=$("$tool" rm --stale shmio-test.)
  rc=$?
  if [ "$when" = after ] && { [ $rc -ne 0 ] || [ "$out" != "nothing stale" ]; }; then
    echo "segments the tests left behind, held by no process:"
    echo "$out"
    status=1
  fi
fi
if [ "$when" = after ] || [ -z "$tool" ]; then
  rm -f /dev/shm/shmio.u"$uid".shmio-test.*
fi
find /dev/shm -maxdepth 1 -name '.shmio.tmp.*' -user "$uid" -mmin +1 -delete
exit $status
