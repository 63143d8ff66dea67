# Sourced by the record_*.sh scripts: `run NAME CMD...` runs CMD with a time limit (RUN_TIMEOUT seconds,
# default 180) between "=== NAME" lines that give its exit code and duration. ONLY="NAME..." runs those names alone
# (re-recording a few runs of a group).
run() {  # name, command...
  local name=$1; shift
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then return 0; fi
  echo "=== $name: $*"
  local t0=$SECONDS
  timeout "${RUN_TIMEOUT:-180}" "$@"
  echo "=== $name rc=$? ($((SECONDS - t0)) s)"
}
