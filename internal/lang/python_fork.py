# Forking helpers shared by the zygote (python_zygote.py) and the context
# runner (python_context.py): Go puts this file before each of them.
import os as _os


# Run child() in a new process, forked through a short-lived intermediate
# that reports the new process's pid with send({'id': rid, 'pid': pid}) and
# exits, so that the new process's parent is the agent, which reaps it. A
# failed fork is reported as {'id': rid, 'error': ...}. The request's fds
# are the new process's: this one closes its copies. child must not return.
def fork_through(rid, fds, send, child):
    try:
        pid = _os.fork()
    except OSError as e:  # the sandbox's process limit, its memory
        close_fds(fds)
        send({'id': rid, 'error': 'fork: %s' % e})
        return
    if pid == 0:
        try:
            try:
                gpid = _os.fork()
            except OSError as e:
                send({'id': rid, 'error': 'fork: %s' % e})
                _os._exit(0)
            if gpid == 0:
                child()
            send({'id': rid, 'pid': gpid})
        finally:
            _os._exit(0)
    close_fds(fds)
    reap(pid)


# Close the fds a request brought.
def close_fds(fds):
    for fd in fds:
        _os.close(fd)


# Wait for an intermediate child (it exits at once).
def reap(pid):
    while True:
        try:
            _os.waitpid(pid, 0)
            return
        except InterruptedError:
            continue
        except ChildProcessError:
            return


