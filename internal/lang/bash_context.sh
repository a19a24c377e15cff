PS1= PS2= PS4=
# (First: no prompt for the lines that follow.)
# Corral's bash code context runner: a persistent interactive shell whose
# variables, functions, working directory and environment carry over from
# cell to cell (internal/kernel has the whole picture).
#
# The agent starts `bash --noprofile --norc --noediting -i -s` with its
# cells on stdin, its raw output on stdout and stderr, and an event stream
# on fd 3; the host writes this file to stdin first. An interactive shell,
# because SIGINT then ends the command line it runs and the shell reads
# the next: that is how a cell is interrupted and the context survives.
# Each cell arrives as two lines:
#
#   __corral_run CELL BASE64-CODE
#   trap '' INT; __corral_end CELL; trap - INT
#
# An interrupt stops the first line; the second always runs, and reports
# the cell's end (with the end markers on the raw streams that the python
# runner writes too). An interrupt is lost when it lands as bash starts a
# command, between its fork and its exec: the child takes it, and bash,
# seeing the child not die of it, runs on. Past its timeout such a cell
# ends all the same: the host restarts the shell. The events are those of python_context.py, less
# results: a cell's output is its commands' raw output, and a non-zero
# status is an error named ExitStatus (KeyboardInterrupt if interrupted).
unset HISTFILE PROMPT_COMMAND
set +o history +m
__corral_count=0
__corral_run() {
    __corral_count=$((__corral_count + 1))
    __corral_status=interrupted
    printf '{"type":"number_of_executions","execution_count":%d,"cell":%d}\n' "$__corral_count" "$1" >&3
    eval "$(printf '%s' "$2" | base64 -d)" </dev/null 3>&-
    __corral_status=$?
}
__corral_end() {
    case $__corral_status in
    0) ;;
    interrupted) printf '{"type":"error","name":"KeyboardInterrupt","cell":%d}\n' "$1" >&3 ;;
    *) printf '{"type":"error","name":"ExitStatus","value":"%d","cell":%d}\n' "$__corral_status" "$1" >&3 ;;
    esac
    printf '\0corral-end:%d\0' "$1"
    printf '\0corral-end:%d\0' "$1" >&2
    printf '{"type":"end_of_execution","cell":%d}\n' "$1" >&3
}
