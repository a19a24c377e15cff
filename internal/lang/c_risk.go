package lang

// cCalls start or trace processes, make raw system calls, load code, open
// sockets, change namespaces or mounts, or make memory executable.
const cCalls = `fork|vfork|clone|clone3|execl|execle|execlp|execv|execve|execvp|execvpe|execveat|fexecve|system|popen|` +
	`posix_spawn|posix_spawnp|syscall|ptrace|process_vm_readv|process_vm_writev|dlopen|dlmopen|dlsym|dlvsym|` +
	`socket|unshare|setns|mount|umount|umount2|pivot_root|chroot|prctl|ioctl|mprotect|personality|keyctl|` +
	`init_module|finit_module|kexec_load|reboot|daemon|setsid`

var cRisks = []riskRule{
	// A call, or the function taken as a value (a pointer to it).
	rule("$1$2()", `\b(`+cCalls+`)[ \t]*\(|[=&,(][ \t]*(`+cCalls+`)[ \t]*[;,)]`, alternatives(cCalls)...),
	rule("inline assembly", `\b(?:asm|__asm__|__asm)\b`, "asm"),
	rule("#include <$1>", `#[ \t]*include[ \t]*[<"]((?:sys/syscall|sys/socket|sys/ptrace|sys/mount|sys/io|dlfcn|spawn|keyutils|linux/[\w/]+|asm/[\w/]+|netinet/\w+|arpa/\w+)\.h)[>"]`, "include"),
	// Token pasting and digraphs build identifiers the rules above would
	// see whole.
	rule("token pasting (##)", `##|%:%:`, "##", "%:%:"),
}

// Risks finds process starts, raw system calls, inline assembly, sockets,
// dynamic loading and executable memory, after joining line
// continuations. See RiskScanner.
func (c) Risks(code string) []Risk {
	return scan(spliced(code), cRisks, kernelRisks)
}

var _ RiskScanner = c{}
