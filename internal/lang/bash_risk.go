package lang

// bashRisks apply to the script with quotes and backslashes removed and
// line continuations joined (see unquoted), which is how bash itself reads
// c'u'r\l: as curl.
var bashRisks = []riskRule{
	// Anything left running in the background: a job (&, but not &&, >&,
	// &> or |&) or a command made for it.
	rule("background job (&)", `(?:^|[^&><|])&(?:[^&>]|$)`, "&"),
	rule("$1", `\b(`+bashDaemons+`)\b`, alternatives(bashDaemons)...),
	// The network.
	rule("$1", `\b(`+bashNetwork+`)\b`, alternatives(bashNetwork)...),
	rule("/dev/$1", `/dev/(tcp|udp)/`, "/dev/"),
	rule("gawk /inet", `/inet[46]?/(?:tcp|udp)`, "/inet"),
	// Other languages, whose code this scan does not read.
	rule("$1", `\b(`+bashInterpreters+`|go[ \t]+(?:run|build))\b`, append(alternatives(bashInterpreters), "go")...),
	rule("system()", `\bsystem[ \t]*\(`, "system"),
	// Kernel and privilege tools.
	rule("$1", `\b(`+bashKernelTools+`)\b`, alternatives(bashKernelTools)...),
	rule("$1", `\b(ip[ \t]+(?:link|route|addr|address)[ \t]+(?:add|del|delete|set|change|replace|flush))\b`, "ip"),
	// Code built at run time.
	rule("eval", `\beval\b`, "eval"),
	rule("pipe into a shell", `\|[ \t]*(?:ba|da|z|k|c|tc)?sh\b`, "sh"),
	rule("$1 -c", `\b((?:ba|da|z|k)?sh)[ \t]+-c\b`, "sh"),
	rule("source <(…)", `(?:^|[ \t;&|])(?:source|\.)[ \t]+<\(`, "<("),
	rule("base64 --decode", `\bbase64[ \t]+(?:-\w+[ \t]+)*(?:-d|--decode|-D)\b`, "base64"),
	rule("xxd -r", `\bxxd[ \t]+(?:-\w+[ \t]+)*-r`, "xxd"),
	rule("command built by printf", `\$\([ \t]*printf\b`, "printf"),
	rule("command name from a variable", `(?m)(?:^|[;&|({]|\b(?:then|do|else|elif|if|while|until|time)[ \t])[ \t]*\$[\w{(!]`, "$"),
}

const (
	bashDaemons      = `nohup|setsid|disown|coproc|crontab|systemd-run|start-stop-daemon|daemonize`
	bashNetwork      = `curl|wget|nc|ncat|netcat|socat|telnet|ssh|scp|sftp|rsync|ftp|tftp|nslookup|dig|ping|ping6|traceroute|nmap`
	bashInterpreters = `python|python2|python3|perl|ruby|node|nodejs|php|lua|tclsh|gcc|cc|tcc|clang`
	bashKernelTools  = `sudo|su|mount|umount|unshare|nsenter|chroot|insmod|rmmod|modprobe|sysctl|mknod|setcap|capsh|gdb|strace|ltrace|iptables|nft|swapon|kexec|reboot`
)

// bashRawRisks apply to the script as written.
var bashRawRisks = []riskRule{
	rule("$'…' escapes", `\$'[^'\n]*\\(?:x[0-9A-Fa-f]|[0-7]{1,3}|u[0-9A-Fa-f]|U[0-9A-Fa-f])`, "$'"),
}

// unquoted drops quotes, backslashes and line continuations, so
// "cu"'r'\l and cu\<newline>rl read as curl.
func unquoted(code string) source {
	return normalise(code, func(s string, i int) int {
		switch s[i] {
		case '\'', '"':
			return 1
		case '\\':
			if i+1 < len(s) && s[i+1] == '\n' {
				return 2
			}
			return 1
		}
		return 0
	})
}

// Risks finds background jobs, network tools, other interpreters, kernel
// tools and dynamic code. Bash starts processes by nature; a command in
// the foreground alone is no risk. See RiskScanner.
func (bash) Risks(code string) []Risk {
	return merge(scan(unquoted(code), bashRisks, kernelRisks), scan(raw(code), bashRawRisks))
}

var _ RiskScanner = bash{}
