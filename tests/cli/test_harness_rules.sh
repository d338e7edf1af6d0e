#!/usr/bin/env bash
# The shell tests' own rules (tests/cli/lib.sh), which keep a broken build
# from looking green (issue 23, "Tests that cannot hide a failure"): a node
# type missing from `sdflow nodes` fails a test (exit 1), it never skips; a
# data skip exits 77, but 1 after a failed check or under
# SDFLOW_REQUIRE_DATA=1 (set by .ci/run); sd_test_end exits 1 after a
# failure. Each rule runs in a subshell and its exit status is checked.
set -u
. "$SDFLOW_SOURCE_DIR/tests/cli/lib.sh"
sd_test_begin cli_harness_rules ImageScale
unset SDFLOW_REQUIRE_DATA

# status CMD...: the exit status of CMD run in a subshell (its output to the log)
status() { ( "$@" ) > "$T/out.txt" 2>&1; echo $?; }
expect() { # expect WANT WHAT CMD...
    local want=$1 what=$2 got
    shift 2
    got=$(status "$@")
    [ "$got" = "$want" ] || fail "$what: exit $got, not $want ($(head -c 300 "$T/out.txt"))"
}

expect 1 "sd_test_need_nodes with an unregistered node" sd_test_need_nodes ImageScale NoSuchNodeType
expect 0 "sd_test_need_nodes with registered nodes" sd_test_need_nodes ImageScale EmptyImage
expect 1 "sd_test_begin with an unregistered node" sd_test_begin cli_harness_rules_x NoSuchNodeType
skip_clean() { failures=0; sd_test_skip_data "data absent"; }
skip_after_failure() { failures=0; fail "(an expected failure)"; sd_test_skip_data "data absent"; }
skip_required() { failures=0; SDFLOW_REQUIRE_DATA=1 sd_test_skip_data "data absent"; }
need_absent_path() { failures=0; sd_test_need_path "$T/no/such/file"; }
need_absent_required() { failures=0; SDFLOW_REQUIRE_DATA=1 sd_test_need_path "$T/no/such/file"; }
end_after_failure() { failures=0; fail "(an expected failure)"; sd_test_end "ok"; }
end_clean() { failures=0; sd_test_end "ok"; }
expect 77 "a data skip" skip_clean
expect 1 "a data skip after a failed check" skip_after_failure
expect 1 "a data skip under SDFLOW_REQUIRE_DATA=1" skip_required
expect 77 "sd_test_need_path on an absent path" need_absent_path
expect 1 "sd_test_need_path on an absent path under SDFLOW_REQUIRE_DATA=1" need_absent_required
expect 1 "sd_test_end after a failure" end_after_failure
expect 0 "sd_test_end with nothing failed" end_clean
sd_test_end "harness rules: ok"
