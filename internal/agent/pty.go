//go:build linux

package agent

import (
	"fmt"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// A process started with a PTY runs on a new pseudo-terminal: the agent
// holds the master, the process gets the slave as stdin, stdout and stderr
// and as its controlling terminal (it leads a new session). The sandbox's
// /dev/pts is a devpts of its own (newinstance, ptmxmode=0666:
// internal/runtime/oci/spec.go) and /dev/ptmx reaches it, on runc and on
// gVisor alike.

// winsize is sz as the kernel takes it; zero is the usual 80×24.
func winsize(sz PTYSize) *unix.Winsize {
	if sz.Cols == 0 {
		sz.Cols = 80
	}
	if sz.Rows == 0 {
		sz.Rows = 24
	}
	return &unix.Winsize{Col: sz.Cols, Row: sz.Rows}
}

// openPTY opens a new pseudo-terminal of size sz and returns the master,
// its file descriptor, and the slave.
func openPTY(sz PTYSize) (int, *os.File, error) {
	m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, nil, fmt.Errorf("open /dev/ptmx: %w", err)
	}
	s, err := openSlave(m)
	if err == nil {
		err = unix.IoctlSetWinsize(s, unix.TIOCSWINSZ, winsize(sz))
		if err != nil {
			unix.Close(s)
		}
	}
	if err != nil {
		unix.Close(m)
		return -1, nil, err
	}
	return m, os.NewFile(uintptr(s), "pty"), nil
}

// openSlave unlocks the master m's slave and opens it: from the master
// itself (TIOCGPTPEER) where the kernel can, else by its number in
// /dev/pts.
func openSlave(m int) (int, error) {
	if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil {
		return -1, fmt.Errorf("unlock pty: %w", err)
	}
	s, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(m), unix.TIOCGPTPEER, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC)
	if errno == 0 {
		return int(s), nil
	}
	n, err := unix.IoctlGetUint32(m, unix.TIOCGPTN)
	if err != nil {
		return -1, fmt.Errorf("pty number: %w", err)
	}
	fd, err := unix.Open("/dev/pts/"+strconv.FormatUint(uint64(n), 10), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open pty %d: %w", n, err)
	}
	return fd, nil
}

// ptyStdio makes the terminal of a process started with a PTY, and its
// status pipe if asked: the child's stdin, stdout and stderr are the slave;
// the agent reads the master (as stdout) through one descriptor and writes
// it (p.stdin, p.pty) through another, so the reader's end at EOF leaves
// resizes and writes to the process's end.
func (a *Agent) ptyStdio(p *proc, sz PTYSize, status bool, user identity) (*procIO, error) {
	m, slave, err := openPTY(sz)
	if err != nil {
		return nil, err
	}
	if user.cred {
		// The terminal is its user's, as a login's is (mesg, write, and
		// programs that reopen /dev/tty's path need it).
		if err := unix.Fchown(int(slave.Fd()), user.uid, -1); err != nil {
			unix.Close(m)
			slave.Close()
			return nil, fmt.Errorf("pty: %w", err)
		}
	}
	d, err := unix.FcntlInt(uintptr(m), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		unix.Close(m)
		slave.Close()
		return nil, fmt.Errorf("dup pty: %w", err)
	}
	// Non-blocking, so that os.NewFile polls both (they share the flag):
	// closing the master then returns a write in progress (stdin.go), which
	// a blocking write(2) would not.
	if err := unix.SetNonblock(m, true); err != nil {
		unix.Close(m)
		unix.Close(d)
		slave.Close()
		return nil, fmt.Errorf("pty: %w", err)
	}
	p.pty = os.NewFile(uintptr(m), "/dev/ptmx")
	p.stdin = p.pty
	p.in = newStdinQueue()
	io := &procIO{
		child:   []*os.File{slave, slave, slave},
		readers: []*os.File{os.NewFile(uintptr(d), "/dev/ptmx")},
		types:   []byte{msgStdout},
	}
	if status {
		if err := io.addPipe(p, msgStatus); err != nil {
			return nil, err
		}
	}
	return io, nil
}

// control runs fn on the terminal's master, unless it is closed.
func (p *proc) control(fn func(fd int) error) error {
	rc, err := p.pty.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return fmt.Errorf("the terminal is closed: %w", syscall.ESRCH)
	}
	return ferr
}

// typeEOF types the terminal's end-of-file character: a program reading
// the terminal in canonical mode at the start of a line reads end of file.
// The terminal stays open (closing the master would hang up the session).
func (p *proc) typeEOF() {
	eof := byte(4) // ^D
	_ = p.control(func(fd int) error {
		if t, err := unix.IoctlGetTermios(fd, unix.TCGETS); err == nil && t.Cc[unix.VEOF] != 0 {
			eof = t.Cc[unix.VEOF]
		}
		return nil
	})
	_, _ = p.pty.Write([]byte{eof})
}

func (a *Agent) onResize(f frame) {
	var sz PTYSize
	if !a.decode(f, "resize", &sz) {
		return
	}
	p := a.byID(f.id)
	switch {
	case p == nil:
		a.fail(f.id, fmt.Errorf("resize: no process %d: %w", f.id, syscall.ESRCH))
	case p.pty == nil:
		a.fail(f.id, refuse(KindInvalid, "resize: process %d has no terminal", f.id))
	default:
		a.reply(f.id, p.control(func(fd int) error {
			if err := unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, winsize(sz)); err != nil {
				return fmt.Errorf("resize: %w", err)
			}
			return nil
		}))
	}
}
