# The zygote protocol (internal/agent/proto.go) as Corral's python zygotes
# speak it: the pool's zygote (python_zygote.py) and the code context runner
# (python_context.py) import this module. In a sandbox there is no file to
# import it from: Go delivers it with each script (python_modules.go). Its
# constants are Go's too; internal/agent's TestPythonZygoteProtocol checks
# them against the agent's.
import os

# The zygote's end of the control socket: the fd after stdio, where the
# agent's start (internal/agent/process.go) puts it.
CONTROL_FD = 3

# One message on a socket carries at most this many bytes and fds. A
# request holds what the agent was asked in one frame (agent.MaxPayload).
MAX_MESSAGE = 1 << 20
MAX_FDS = 8

# The exit status of a child that could not become what it was forked for
# (EX_SOFTWARE, sysexits.h).
EXIT_SETUP_FAILED = 70

# The keys of the protocol's messages: zygoteMsg's JSON names, each
# constant named after its field (KEY_EXITED is Exited).
KEY_ID = 'id'
KEY_ARGV = 'argv'
KEY_ENV = 'env'
KEY_DIR = 'dir'
KEY_PID = 'pid'
KEY_PING = 'ping'
KEY_PONG = 'pong'
KEY_READY = 'ready'
KEY_SPARE = 'spare'
KEY_ERROR = 'error'
KEY_EXITED = 'exited'
KEY_STATUS = 'status'
KEY_REAPS = 'reaps'
KEY_ZYGOTE = 'zygote'


# Run child() in a new process, forked through a short-lived intermediate
# that reports the new process's pid with send({'id': rid, 'pid': pid}) and
# exits, so that the new process's parent is the agent, which reaps it. A
# failed fork is reported as {'id': rid, 'error': ...}. The request's fds
# are the new process's: this one closes its copies. child must not return.
def fork_through(rid, fds, send, child):
    try:
        pid = os.fork()
    except OSError as e:  # the sandbox's process limit, its memory
        close_fds(fds)
        send({KEY_ID: rid, KEY_ERROR: 'fork: %s' % e})
        return
    if pid == 0:
        try:
            try:
                gpid = os.fork()
            except OSError as e:
                send({KEY_ID: rid, KEY_ERROR: 'fork: %s' % e})
                os._exit(0)
            if gpid == 0:
                child()
            send({KEY_ID: rid, KEY_PID: gpid})
        finally:
            os._exit(0)
    close_fds(fds)
    reap(pid)


# Close the fds a request brought.
def close_fds(fds):
    for fd in fds:
        os.close(fd)


# Wait for an intermediate child (it exits at once).
def reap(pid):
    while True:
        try:
            os.waitpid(pid, 0)
            return
        except InterruptedError:
            continue
        except ChildProcessError:
            return
