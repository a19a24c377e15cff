#!/usr/bin/python3
"""Corral's test lanes: which package runs where, and how long each took.

    scripts/lanes.py list unit|root|parallel|serial
    scripts/lanes.py unit [PKG...]   the unit lane, as the user nobody
    scripts/lanes.py root [PKG...]   the root lane: sandbox tests, strict
    scripts/lanes.py fuzz [PKG...]   every fuzz target, fuzzed a few seconds each
    scripts/lanes.py report   the slowest packages of the lanes run so far

The lanes come from file names, not from a list to keep up to date: a test
declared in a *_sandbox_test.go file needs root (real runc and runsc
sandboxes, cgroups, mounts); any other test must pass as nobody over the
fake runtime. A package is in the unit lane when a test of it sits outside
such files, in the root lane when one sits inside (a package can be in
both). Each test runs in one lane only: the root lane runs just the tests
of *_sandbox_test.go files (-run), except in the packages of UNSPLIT, whose
root-only tests have not moved yet and which run whole, as root.

The unit lane runs its packages in parallel (-p, one per core), as nobody
(scripts/as-nobody), with coverage. It fails on a failure, on a skip outside
a *_sandbox_test.go file, and on a slow package: one whose test binary used
more than UNIT_CPU seconds of CPU (its own and its fake sandboxes'), or ran
longer than UNIT_WALL seconds. Both budgets are per package and count the
test binary alone, not compiling and linking it: a cold build cache cannot
fail the lane, and the package at fault is named rather than a total that
grows with every package added. CPU time is the tight budget because it
barely moves with the machine's load (another job on the cores slows a run
but does not add to its CPU time); run time has a loose one, for tests that
wait rather than work.

The root lane runs with CORRAL_TEST_STRICT=1: a missing prerequisite fails
instead of skipping. Its packages in PARALLEL run two at a time (-p 2);
the others, one at a time (-p 1), since they start CPU-bound sandboxes
(fork bombs, memory balloons, hundreds of executions), assert timings ("a 1 s
timeout is answered within 1.5 s") or look at the whole host (its thread
count, free memory), and must have the cores to themselves. A new package
is serial until measured.

The fuzz lane fuzzes every Fuzz target of the module for FUZZ_TIME seconds
(CORRAL_FUZZTIME), one target per run as Go requires, as nobody when run as
root. An input that fails is written to the package's testdata/fuzz/FuzzX/
(Go's corpus format; go test then runs it as a seed) and fails the lane.
The unit lane already ran every target's seeds and committed corpus.

Every lane writes go test -json to bin/test-timings/LANE.json and its
packages' times to bin/test-timings/LANE.tsv; report prints them, the
slowest first.
"""

import collections
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODULE = "github.com/corralhq/corral/"
OUT = os.path.join(ROOT, "bin", "test-timings")

# What a unit package's test binary may use (see above), in seconds.
# Measured figures: docs/testing.md.
UNIT_CPU = 60
UNIT_WALL = 120

# Packages whose root-only tests still sit among their unit tests: they run
# whole in the root lane, and not in the unit lane, until they are split.
UNSPLIT = set()

# Root-only packages that run at a time of their own, not in the root lane.
ELSEWHERE = {
    "test/leakcheck": "make leakcheck, after everything",
    "test/container": "make test-image, against the image",
}

# Root-lane packages measured light: together two of them leave the cores
# to each other's sandboxes, assert no timing and look at no host-wide
# state. Figures: docs/testing.md.
PARALLEL = {
    "internal/fleet",
    "internal/images",
    "internal/runtime/cgroup",
    "internal/runtime/disk",
}

# Go runs tests, fuzz targets (their seeds) and examples; TestMain is none.
DECL = re.compile(r"^func ((?:Test|Fuzz|Example)(?:[^a-z(]\w*)?)\(", re.M)


def short(pkg):
    return pkg[len(MODULE):] if pkg.startswith(MODULE) else pkg


def packages():
    """Each package with tests: {path: (unit tests, sandbox tests, dir)}."""
    out = subprocess.run(
        ["go", "list", "-f", '{{.ImportPath}}\t{{.Dir}}\t{{join .TestGoFiles ","}}\t{{join .XTestGoFiles ","}}', "./..."],
        cwd=ROOT, check=True, capture_output=True, text=True).stdout
    pkgs = {}
    for line in out.splitlines():
        imp, d, a, b = line.split("\t")
        unit, sandbox = set(), set()
        for f in filter(None, a.split(",") + b.split(",")):
            with open(os.path.join(d, f)) as fh:
                names = set(DECL.findall(fh.read())) - {"TestMain"}
            (sandbox if f.endswith("_sandbox_test.go") else unit).update(names)
        if unit or sandbox:
            pkgs[short(imp)] = (unit, sandbox, d)
    return pkgs


def lane(name, pkgs=None):
    """The packages of a lane, sorted."""
    pkgs = pkgs or packages()
    if name == "unit":
        got = [p for p, (u, _, _) in pkgs.items() if u and p not in UNSPLIT]
    elif name == "root":
        got = [p for p, (_, s, _) in pkgs.items() if (s or p in UNSPLIT) and p not in ELSEWHERE]
    elif name == "parallel":
        got = [p for p in lane("root", pkgs) if p in PARALLEL]
    elif name == "serial":
        got = [p for p in lane("root", pkgs) if p not in PARALLEL]
    else:
        sys.exit("lanes.py: no lane %r" % name)
    return sorted(got)


class Run:
    """One go test -json run: its events, echoed as they come."""

    def __init__(self, name):
        self.name = name
        self.times = os.path.join(OUT, name + ".times")
        self.out = collections.defaultdict(list)  # (pkg, test) -> lines
        self.result = {}  # (pkg, test) -> pass/fail/skip, leaf or not
        self.pkg = {}  # pkg -> (action, elapsed)
        self.cover = {}
        self.cpu = {}  # pkg -> CPU seconds of its test binary and children
        self.sandbox_cpu = {}  # pkg -> CPU seconds of the test sandboxes meanwhile
        self.dirs = {}  # package directory -> package

    def go(self, args, env, wrapper=(), echo=True):
        """Runs go test -json args, each test binary through scripts/cputime
        (and wrapper after it)."""
        os.makedirs(OUT, exist_ok=True)
        env = dict(env, CORRAL_TEST_TIMES=self.times)
        args = ["-exec", " ".join([os.path.join(ROOT, "scripts", "cputime")] + list(wrapper))] + args
        log = open(os.path.join(OUT, self.name + ".json"), "a")
        p = subprocess.Popen(["go", "test", "-json"] + args, cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, text=True)
        for line in p.stdout:
            log.write(line)
            try:
                ev = json.loads(line)
            except ValueError:
                print(line, end="")
                continue
            self.event(ev, echo)
        log.close()
        return p.wait()

    def event(self, ev, echo):
        act = ev.get("Action")
        pkg, test = short(ev.get("Package", "")), ev.get("Test", "")
        if act == "build-output":
            print(ev.get("Output", ""), end="")
        elif act == "output":
            o = ev["Output"]
            self.out[(pkg, test)].append(o)
            if not test and o.startswith("coverage:"):
                self.cover[pkg] = o[len("coverage:"):].strip().replace(" of statements", "")
        elif act in ("pass", "fail", "skip"):
            if test:
                self.result[(pkg, test)] = act
                return
            self.pkg[pkg] = (act, ev.get("Elapsed", 0.0))
            self.read_times()
            if echo:
                n = sum(1 for (p, _), res in self.leaves().items() if p == pkg and res == "pass")
                extra = "  coverage " + self.cover[pkg] if pkg in self.cover else ""
                if self.sandbox_cpu.get(pkg):
                    extra = "  sandboxes %5.1f s" % self.sandbox_cpu[pkg] + extra
                if pkg in self.cpu:
                    extra = "  cpu %5.1f s" % self.cpu[pkg] + extra
                print("%-4s %-40s %7.1f s %4d tests passed%s" % ("ok" if act != "fail" else "FAIL", pkg, ev.get("Elapsed", 0.0), n, extra), flush=True)
            if act == "fail":
                self.failed_output(pkg)

    def read_times(self):
        """What scripts/cputime recorded: DIR, user and system time as the
        shell's times prints them (0m1.230000s 0m0.120000s), nanoseconds of
        the sandboxes; tab-separated."""
        if not os.path.exists(self.times):
            return
        for line in open(self.times):
            f = line.rstrip("\n").split("\t")
            if len(f) != 3 or f[0] not in self.dirs:
                continue
            secs = 0.0
            for t in f[1].split():
                m = re.fullmatch(r"(\d+)m([\d.]+)s", t)
                if m:
                    secs += int(m.group(1)) * 60 + float(m.group(2))
            self.cpu[self.dirs[f[0]]] = secs
            if self.name == "root":  # the unit lane's fake sandboxes have no cgroup
                self.sandbox_cpu[self.dirs[f[0]]] = int(f[2] or 0) / 1e9

    def failed_output(self, pkg):
        """Prints the output of pkg's failed tests, or all of its own."""
        failed = [t for (p, t), r in self.result.items() if p == pkg and r == "fail"]
        if not failed:
            print("".join(self.out[(pkg, "")]), end="")
            return
        for t in failed:
            if "/" not in t:
                for (p, u), lines in sorted(self.out.items()):
                    if p == pkg and (u == t or u.startswith(t + "/")):
                        print("".join(lines), end="")

    def leaves(self):
        """Leaf tests and their results: a test whose subtests all
        skipped passes itself, so it would count as a pass."""
        parents = {(p, t.rsplit("/", 1)[0]) for p, t in self.result if "/" in t}
        return {k: r for k, r in self.result.items() if k not in parents}

    def write(self, lane_name):
        with open(os.path.join(OUT, lane_name + ".tsv"), "w") as f:
            for pkg, (act, el) in sorted(self.pkg.items()):
                f.write("%s\t%s\t%s\t%.1f\t%.1f\t%.1f\n" % (lane_name, pkg, act, el, self.cpu.get(pkg, 0), self.sandbox_cpu.get(pkg, 0)))


def fresh(name):
    os.makedirs(OUT, exist_ok=True)
    for ext in (".json", ".tsv", ".times"):
        try:
            os.remove(os.path.join(OUT, name + ext))
        except FileNotFoundError:
            pass


def slowest(rows, n):
    """Prints the n slowest of rows (lane, package, result, seconds, CPU
    seconds, sandboxes' CPU seconds)."""
    for ln, pkg, act, el, cpu, sb in sorted(rows, key=lambda r: -r[3])[:n]:
        sbs = ", sandboxes %6.1f s" % sb if ln == "root" else ""
        print("  %7.1f s  %-28s %-4s  cpu %6.1f s%s%s" % (el, pkg, ln, cpu, sbs, "" if act == "pass" else "  (" + act + ")"))


def rows(r, ln):
    return [(ln, p, a, e, r.cpu.get(p, 0), r.sandbox_cpu.get(p, 0)) for p, (a, e) in r.pkg.items()]


def only(pkgs, want):
    """pkgs, or those of them named in want (as internal/fleet or ./internal/fleet)."""
    if not want:
        return pkgs
    want = {w.removeprefix("./").rstrip("/") for w in want}
    if want - set(pkgs):
        sys.exit("not in this lane: " + " ".join(sorted(want - set(pkgs))))
    return [p for p in pkgs if p in want]


def unit(want):
    every = packages()
    pkgs = only(lane("unit", every), want)
    subprocess.run(["go", "build", "./..."], cwd=ROOT, check=True)  # compile errors first
    # The corral binary tests run (testenv.Corral), built here as root from
    # this checkout: nobody has no build cache, and would compile it cold.
    tmp = os.environ.get("CORRAL_UNIT_TMP", "/tmp/corral-unit")
    bindir = os.path.join(tmp, "bin", "corral-%d" % os.getpid())
    os.makedirs(bindir, exist_ok=True)
    for d in (tmp, os.path.join(tmp, "bin"), bindir):
        os.chmod(d, 0o755)
    env = dict(os.environ, CORRAL_TEST_BINARY=os.path.join(bindir, "corral"), CORRAL_UNIT_TMP=tmp, CGO_ENABLED="0")
    try:
        for out, pkg in (("corral", "./cmd/corral"), ("corral-agent", "./cmd/corral-agent")):
            subprocess.run(["go", "build", "-trimpath", "-o", os.path.join(bindir, out), pkg], cwd=ROOT, env=env, check=True)
        fresh("unit")
        r = Run("unit")
        r.dirs = {every[p][2]: p for p in pkgs}
        start = time.time()
        status = r.go(["-count=1", "-cover", "-p", str(os.cpu_count() or 1)] + ["./" + p for p in pkgs],
                      env, wrapper=[os.path.join(ROOT, "scripts", "as-nobody")])
        took = time.time() - start
    finally:
        subprocess.run(["rm", "-rf", bindir])
    r.write("unit")

    passed, skipped, bad = collections.Counter(), [], []
    for k, res in sorted(r.leaves().items()):
        if res == "pass":
            passed[k[0]] += 1
        elif res == "skip":
            if "_sandbox_test.go" in "".join(r.out[k]):
                skipped.append(k)
            else:
                bad.append(k)
    failed = sorted(p for p, (act, _) in r.pkg.items() if act == "fail")
    for k in bad:
        print("skipped as nobody, outside a *_sandbox_test.go file: %s %s\n%s" % (k[0], k[1], "".join(r.out[k])), end="")
    slow = []
    for p, (_, el) in sorted(r.pkg.items()):
        cpu = r.cpu.get(p)
        if cpu is None:
            slow.append(p)
            print("%s: no CPU time recorded" % p)
        elif cpu > UNIT_CPU or el > UNIT_WALL:
            slow.append(p)
            print("%s: its tests used %.0f s of CPU in %.0f s, over the unit lane's budget of %d s of CPU and %d s: "
                  "make them faster, or move the slow ones to a *_sandbox_test.go file" % (p, cpu, el, UNIT_CPU, UNIT_WALL))
    missing = [p for p in pkgs if p not in r.pkg]
    for p in missing:
        print("%s: no result (did it build?)" % p)
    n = len(r.pkg)
    print("unit lane: %d packages, %d tests passed as nobody in %.0f s (compiling included), %.0f s of CPU in test binaries; "
          "%d root-only tests skipped; %d packages failed"
          % (n, sum(passed.values()), took, sum(r.cpu.values()), len(skipped), len(failed)))
    print("slowest:")
    slowest(rows(r, "unit"), 5)
    if status != 0 or failed or bad or slow or missing:
        sys.exit(1)


def root(want):
    pkgs = packages()
    chosen = only(lane("root", pkgs), want)
    # Only what needs root runs here; the unit lane ran the rest.
    names = sorted(set().union(*(pkgs[p][1] | (pkgs[p][0] if p in UNSPLIT else set()) for p in chosen)))
    run = "^(" + "|".join(names) + ")$"
    env = dict(os.environ, CORRAL_TEST_STRICT="1", CGO_ENABLED="0")
    fresh("root")
    r = Run("root")
    r.dirs = {pkgs[p][2]: p for p in chosen}
    # Compile every test binary first, in parallel: one at a time, as the
    # serial packages run, compiling would add to the lane.
    subprocess.run(["go", "test", "-count=1", "-run", "^$", "-p", str(os.cpu_count() or 1)] + ["./" + p for p in chosen],
                   cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    start, status = time.time(), 0
    for group, p in (("parallel", "2"), ("serial", "1")):
        ps = [x for x in lane(group, pkgs) if x in chosen]
        if not ps:
            continue
        print("root lane, %s (-p %s): %d packages" % (group, p, len(ps)), flush=True)
        status |= r.go(["-count=1", "-timeout", "25m", "-p", p, "-run", run] + ["./" + x for x in ps], env)
    r.write("root")
    took = time.time() - start
    failed = sorted(p for p, (act, _) in r.pkg.items() if act == "fail")
    missing = [p for p in chosen if p not in r.pkg]
    print("root lane: %d packages in %.0f s; %d failed%s" % (len(r.pkg), took, len(failed), (": " + " ".join(failed)) if failed else ""))
    for p in missing:
        print("%s: no result (did it build?)" % p)
    print("slowest:")
    slowest(rows(r, "root"), 5)
    if status != 0 or failed or missing:
        sys.exit(1)


# Seconds each fuzz target is fuzzed (CORRAL_FUZZTIME overrides), and the
# most the targets' runs may take together (compiling aside, as in the unit
# lane): past it the lane fails, so that a target added costs another's
# time rather than the suite's. Measured figures: docs/testing.md.
FUZZ_TIME = float(os.environ.get("CORRAL_FUZZTIME", "3"))
FUZZ_BUDGET = 150
# Targets fuzzed at once, one worker each.
FUZZ_JOBS = 2


def work_dir(tmp, p):
    """The scratch copy of package p's testdata the fuzz lane runs it in."""
    return os.path.join(tmp, p.replace("/", "_"))


def fuzz_targets(pkgs):
    """{package: [Fuzz targets]} of the packages with any; the targets of
    *_sandbox_test.go files need root and sandboxes, and there are none."""
    got = {}
    for p, (u, s, _) in pkgs.items():
        ts = sorted(n for n in u if n.startswith("Fuzz"))
        if [n for n in s if n.startswith("Fuzz")]:
            sys.exit("%s: a fuzz target in a *_sandbox_test.go file: the fuzz lane runs as nobody" % p)
        if ts:
            got[p] = ts
    return got


def fuzz(want):
    every = packages()
    targets = fuzz_targets(every)
    pkgs = only(sorted(targets), want)
    tmp = os.environ.get("CORRAL_FUZZ_TMP", "/tmp/corral-fuzz")
    as_root = os.geteuid() == 0
    subprocess.run(["rm", "-rf", tmp], check=True)
    os.makedirs(os.path.join(tmp, "bin"))
    os.chmod(tmp, 0o755)
    os.chmod(os.path.join(tmp, "bin"), 0o755)
    env = dict(os.environ, CGO_ENABLED="0")
    env.pop("CI", None)
    env.pop("CORRAL_TEST_STRICT", None)
    start, failed, found, took = time.time(), [], [], []
    n = sum(len(targets[p]) for p in pkgs)
    print("fuzz lane: %d targets in %d packages, %.0f s each" % (n, len(pkgs), FUZZ_TIME), flush=True)
    # Compile every package's instrumented test binary, then fuzz the
    # targets FUZZ_JOBS at a time, each with one worker (-test.parallel=1):
    # the same fuzzing per target as one at a time with a worker per core,
    # but the start and the baseline coverage run of one target (a good
    # part of its time, and single-threaded) overlap another's fuzzing.
    def build(p):
        binary = os.path.join(tmp, "bin", p.replace("/", "_") + ".test")
        # Instrumented for fuzzing; compiled as root, where the build cache is.
        b = subprocess.run(["go", "test", "-c", "-fuzz=.", "-o", binary, "./" + p], cwd=ROOT, env=env)
        if b.returncode != 0:
            return None
        # Each package runs in a scratch copy of its testdata: the targets
        # read their corpus from there and write what fails there.
        d = every[p][2]
        work = work_dir(tmp, p)
        os.makedirs(work)
        if os.path.isdir(os.path.join(d, "testdata")):
            subprocess.run(["cp", "-a", os.path.join(d, "testdata"), work], check=True)
        cache = os.path.join(tmp, "cache", p.replace("/", "_"))
        os.makedirs(cache, exist_ok=True)
        return binary, work, cache

    home = os.path.join(tmp, "home")
    os.makedirs(home, exist_ok=True)
    os.makedirs(os.path.join(tmp, "cache"), exist_ok=True)
    # One package at a time: the packages share most of their (instrumented)
    # dependencies, which two builds at once would both compile.
    built = {p: build(p) for p in pkgs}
    print("fuzz lane: %d packages compiled in %.0f s" % (len(pkgs), time.time() - start), flush=True)
    for p in pkgs:
        if built[p] is None:
            failed.append(p)
    if as_root:
        dirs = [b[1] for b in built.values() if b] + [home, os.path.join(tmp, "cache")]
        subprocess.run(["chown", "-R", "65534:65534"] + dirs, check=True)

    def run(p, t):
        binary, work, cache = built[p]
        d = every[p][2]
        cmd = [binary, "-test.run=^$", "-test.fuzz=^%s$" % t, "-test.fuzztime=%gs" % FUZZ_TIME,
               "-test.fuzzcachedir=" + cache, "-test.timeout=%ds" % (FUZZ_TIME + 300),
               "-test.parallel=1",
               # Go minimizes each new interesting input for up to 60 s,
               # past the fuzz time, which then fails the run with
               # "context deadline exceeded" (large seeds: FuzzPath).
               "-test.fuzzminimizetime=1s"]
        if as_root:
            cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "env",
                   "HOME=" + home, "TMPDIR=" + home] + cmd
        t0 = time.time()
        r = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
        retried = coordinator_race(r, work, d, t)
        if retried:
            # Go 1.26's fuzz coordinator can fail a target that found
            # nothing at the fuzz time's end (go.dev/issue/75804, fixed
            # in Go 1.27): the lone message is the deadline's and no
            # input was written. Once more; a second time is a failure.
            r = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
        return p, t, time.time() - t0, r, retried

    work_items = [(p, t) for p in pkgs if built[p] for t in targets[p]]
    with concurrent.futures.ThreadPoolExecutor(FUZZ_JOBS) as ex:
        for f in concurrent.futures.as_completed([ex.submit(run, p, t) for p, t in work_items]):
            p, t, secs, r, retried = f.result()
            if retried:
                print("     %-28s %-28s go.dev/issue/75804 (no input written): ran once more" % (p, t), flush=True)
            took.append((secs, p, t))
            execs = re.findall(r"execs: (\d+)", r.stdout + r.stderr)
            print("%-4s %-28s %-28s %5.1f s %9s execs" % ("ok" if r.returncode == 0 else "FAIL", p, t, secs,
                                                       execs[-1] if execs else "?"), flush=True)
            if r.returncode != 0:
                failed.append(p + " " + t)
                print(r.stdout + r.stderr)
                found += keep_crashers(work_dir(tmp, p), every[p][2], t)
    total = time.time() - start
    for f in found:
        print("the failing input is kept in %s: fix the code; go test runs it from now on" % os.path.relpath(f, ROOT))
    print("fuzz lane: %d targets in %.0f s (compiling included), %.0f s fuzzing; %d failed%s"
          % (n, total, sum(t[0] for t in took), len(failed), (": " + ", ".join(failed)) if failed else ""))
    fuzzing = sum(t[0] for t in took)
    if fuzzing > FUZZ_BUDGET and "CORRAL_FUZZTIME" not in os.environ and not want:
        print("fuzz lane: its targets ran %.0f s, over its budget of %d s: lower FUZZ_TIME in scripts/lanes.py"
              % (fuzzing, FUZZ_BUDGET))
        sys.exit(1)
    if failed:
        sys.exit(1)


def coordinator_race(r, work, d, target):
    """Whether a fuzz run failed only with the coordinator's own deadline,
    having written no failing input (none in work's testdata the package's
    own lacks): go.dev/issue/75804."""
    if r.returncode == 0:
        return False
    lines = [l.strip() for l in (r.stdout + r.stderr).splitlines()
             if l.strip() and not l.startswith(("fuzz: ", "warning: starting with empty corpus"))]
    race = (len(lines) == 3 and lines[0].startswith("--- FAIL: " + target + " ")
            and lines[1] == "context deadline exceeded" and lines[2] == "FAIL")
    return race and not new_inputs(work, d, target)


def new_inputs(work, d, target):
    """The inputs in work's testdata/fuzz/TARGET that d's lacks."""
    src = os.path.join(work, "testdata", "fuzz", target)
    dst = os.path.join(d, "testdata", "fuzz", target)
    if not os.path.isdir(src):
        return []
    return [f for f in sorted(os.listdir(src)) if not os.path.exists(os.path.join(dst, f))]


def keep_crashers(work, d, target):
    """Copies the inputs the run wrote for target into the package's own
    testdata/fuzz/TARGET; returns their paths there."""
    src = os.path.join(work, "testdata", "fuzz", target)
    dst = os.path.join(d, "testdata", "fuzz", target)
    kept = []
    for f in new_inputs(work, d, target):
        os.makedirs(dst, exist_ok=True)
        with open(os.path.join(src, f), "rb") as a, open(os.path.join(dst, f), "wb") as b:
            b.write(a.read())
        kept.append(os.path.join(dst, f))
    return kept


def report():
    got = []
    for f in sorted(os.listdir(OUT)) if os.path.isdir(OUT) else []:
        if f.endswith(".tsv"):
            for line in open(os.path.join(OUT, f)):
                ln, pkg, act, el, cpu, sb = line.rstrip("\n").split("\t")
                got.append((ln, pkg, act, float(el), float(cpu), float(sb)))
    if not got:
        sys.exit("no timings: run a lane first")
    with open(os.path.join(ROOT, "bin", "test-timings.txt"), "w") as f:
        f.write("# seconds: run time, CPU of the test binary and its children, CPU of the test sandboxes meanwhile\n")
        for ln, pkg, act, el, cpu, sb in sorted(got, key=lambda r: -r[3]):
            f.write("%8.1f %8.1f %8.1f  %-40s %-4s %s\n" % (el, cpu, sb, pkg, ln, act))
    for ln in sorted({r[0] for r in got}):
        sub = [r for r in got if r[0] == ln]
        print("%s lane: %d packages, %.0f s of test binaries" % (ln, len(sub), sum(r[3] for r in sub)))
    print("the five slowest packages (all of them: bin/test-timings.txt):")
    slowest(got, 5)


def main():
    args = sys.argv[1:]
    if args[:1] == ["list"] and len(args) == 2:
        print("\n".join(lane(args[1])))
    elif args[:1] == ["unit"]:
        unit(args[1:])
    elif args[:1] == ["root"]:
        root(args[1:])
    elif args[:1] == ["fuzz"]:
        fuzz(args[1:])
    elif args == ["report"]:
        report()
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
