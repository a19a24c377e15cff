// Package test checks the Helm chart deploy/helm/corral with Helm's own Go
// SDK: its lint passes; it renders (as `helm template` does) for the
// default values and examples/production.yaml, matching golden files
// (go test -update rewrites them); every object decodes strictly into its
// k8s.io/api (or Prometheus Operator) type; the rendered configuration is
// accepted by corral's own `config check`; and what cannot work refuses to
// render. It is its own module so that the corral module does not depend on
// Helm and client-go.
package test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden files")

const (
	chartDir  = "../corral"
	namespace = "corral"
	release   = "corral"
)

// kubeVersion is the cluster the chart is rendered for: the oldest its
// Chart.yaml accepts is 1.27; this is a current one.
var kubeVersion = chartutil.KubeVersion{Version: "v1.33.0", Major: "1", Minor: "33"}

// cases are the values files the chart must render: its defaults, and a
// production install.
var cases = []struct {
	name, values string
	// secrets stands in for the Secrets a production install names but
	// the chart does not make (secretKeyRef): name/key → value.
	secrets map[string]string
	// want are words corral config check must print.
	want []string
}{
	{name: "default", want: []string{"store sqlite", "state memory", "blob local", "node corral-0", "0 tenant(s)"}},
	{name: "production", values: "../examples/production.yaml",
		secrets: map[string]string{
			"corral-postgres/url":             "postgres://corral:secret@db.internal:5432/corral?sslmode=require",
			"corral-redis/url":                "rediss://:secret@redis.internal:6379/0?prefix=corral:",
			"corral-s3/AWS_ACCESS_KEY_ID":     "AKIAEXAMPLE",
			"corral-s3/AWS_SECRET_ACCESS_KEY": "example-secret",
		},
		want: []string{"store postgres", "state redis", "blob s3", "node corral-0", "2 tenant(s)"}},
}

func readValues(t *testing.T, file string) map[string]any {
	t.Helper()
	if file == "" {
		return map[string]any{}
	}
	v, err := chartutil.ReadValuesFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// render renders the chart as `helm template` does.
func render(vals map[string]any) (string, error) {
	ch, err := loader.Load(chartDir)
	if err != nil {
		return "", err
	}
	inst := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	inst.DryRun, inst.ClientOnly, inst.Replace = true, true, true
	inst.ReleaseName, inst.Namespace = release, namespace
	inst.KubeVersion = &kubeVersion
	inst.APIVersions = chartutil.VersionSet{"monitoring.coreos.com/v1"}
	rel, err := inst.Run(ch, vals)
	if err != nil {
		return "", err
	}
	return rel.Manifest, nil
}

func TestLint(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := lint.AllWithKubeVersion(chartDir, readValues(t, c.values), namespace, &kubeVersion)
			for _, m := range l.Messages {
				// helm lint --strict: warnings fail too; information
				// (such as "icon is recommended") does not.
				if m.Severity >= support.WarningSev {
					t.Errorf("lint: %s", m)
				} else {
					t.Logf("lint: %s", m)
				}
			}
		})
	}
}

func TestRender(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			vals := readValues(t, c.values)
			manifest, err := render(vals)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, filepath.Join("testdata", c.name+".golden.yaml"), manifest)
			objs := decodeAll(t, manifest)
			checkObjects(t, objs, vals)
			checkConfig(t, objs, c.secrets, c.want)
		})
	}
}

// TestRefuses renders values that cannot work.
func TestRefuses(t *testing.T) {
	for _, c := range []struct {
		name string
		vals string
		want string
	}{
		{"several nodes on the embedded backends", "replicas: 2",
			"replicas=2 needs shared backends, or each node keeps its own records, queue and artifacts; missing: postgres (postgres.url or postgres.existingSecret), redis (redis.url or redis.existingSecret), s3 (s3.url)"},
		{"several nodes without S3", "replicas: 3\npostgres: {url: postgres://db/corral}\nredis: {url: redis://redis:6379/0}",
			"missing: s3 (s3.url)"},
		{"no node", "replicas: 0", "replicas must be at least 1"},
		{"S3 without credentials", "s3: {url: s3://s3.internal/bucket}", "s3.url needs s3.accessKeyId and s3.secretAccessKey, or s3.existingSecret"},
		{"listen is the chart's", "config: {listen: '0.0.0.0:9999'}", "config.listen is set by the chart"},
		{"bad anti-affinity", "podAntiAffinity: sometimes", "podAntiAffinity: hard, soft or none"},
	} {
		t.Run(c.name, func(t *testing.T) {
			vals, err := chartutil.ReadValues([]byte(c.vals))
			if err != nil {
				t.Fatal(err)
			}
			_, err = render(vals)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("render: %v, want an error with %q", err, c.want)
			}
		})
	}
	// Shared backends make several nodes fine.
	vals, err := chartutil.ReadValues([]byte("replicas: 3\npostgres: {url: postgres://db/corral}\nredis: {url: redis://redis:6379/0}\n" +
		"s3: {url: s3://s3.internal/bucket, accessKeyId: a, secretAccessKey: b}"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := render(vals); err != nil {
		t.Errorf("three nodes on shared backends: %v", err)
	}
}

func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update writes it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s differs (-want +got; go test -update rewrites it):\n%s", path, diff)
	}
}

// objects are the rendered objects, decoded, by kind/name.
type objects map[string]any

func (o objects) get(t *testing.T, kind, name string) any {
	t.Helper()
	v, ok := o[kind+"/"+name]
	if !ok {
		t.Fatalf("no %s %s rendered", kind, name)
	}
	return v
}

// types maps apiVersion/kind to the type an object must decode into.
var types = map[string]func() any{
	"v1/ConfigMap":                            func() any { return &corev1.ConfigMap{} },
	"v1/Secret":                               func() any { return &corev1.Secret{} },
	"v1/Service":                              func() any { return &corev1.Service{} },
	"v1/ServiceAccount":                       func() any { return &corev1.ServiceAccount{} },
	"apps/v1/StatefulSet":                     func() any { return &appsv1.StatefulSet{} },
	"policy/v1/PodDisruptionBudget":           func() any { return &policyv1.PodDisruptionBudget{} },
	"networking.k8s.io/v1/NetworkPolicy":      func() any { return &networkingv1.NetworkPolicy{} },
	"monitoring.coreos.com/v1/ServiceMonitor": func() any { return &monitoringv1.ServiceMonitor{} },
}

var separator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// decodeAll decodes every document strictly: YAML to JSON, then JSON into
// the kind's type with unknown fields refused, so a misspelt or misplaced
// field fails here instead of being dropped by the API server.
func decodeAll(t *testing.T, manifest string) objects {
	t.Helper()
	out := objects{}
	for _, doc := range separator.Split(manifest, -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		j, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatalf("YAML: %v\n%s", err, doc)
		}
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(j, &meta); err != nil {
			t.Fatal(err)
		}
		newObj, ok := types[meta.APIVersion+"/"+meta.Kind]
		if !ok {
			t.Errorf("no type for %s %s: add it to types", meta.APIVersion, meta.Kind)
			continue
		}
		obj := newObj()
		dec := json.NewDecoder(bytes.NewReader(j))
		dec.DisallowUnknownFields()
		if err := dec.Decode(obj); err != nil {
			t.Errorf("%s %s does not decode strictly into %T: %v", meta.Kind, meta.Metadata.Name, obj, err)
			continue
		}
		key := meta.Kind + "/" + meta.Metadata.Name
		if _, dup := out[key]; dup {
			t.Errorf("%s rendered twice", key)
		}
		out[key] = obj
	}
	return out
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// checkObjects checks what the chart promises beyond decoding: the drain's
// grace period, probes, the privileges a node needs and nothing more.
func checkObjects(t *testing.T, objs objects, vals map[string]any) {
	t.Helper()
	ss := objs.get(t, "StatefulSet", release).(*appsv1.StatefulSet)
	pod := ss.Spec.Template.Spec
	drain := map[string]int64{"timeoutSeconds": 300, "preStopSleepSeconds": 5, "marginSeconds": 30}
	if d, ok := vals["drain"].(map[string]any); ok {
		for k, v := range d {
			drain[k] = int64(v.(float64))
		}
	}
	if want := drain["timeoutSeconds"] + drain["preStopSleepSeconds"] + drain["marginSeconds"]; pod.TerminationGracePeriodSeconds == nil || *pod.TerminationGracePeriodSeconds != want {
		t.Errorf("terminationGracePeriodSeconds %v, want %d", pod.TerminationGracePeriodSeconds, want)
	}
	if pod.EnableServiceLinks == nil || *pod.EnableServiceLinks {
		t.Error("service links on: a Service named corral would inject CORRAL_* variables")
	}
	if len(pod.Containers) != 1 || len(pod.InitContainers) != 1 {
		t.Fatalf("containers %d, init containers %d", len(pod.Containers), len(pod.InitContainers))
	}
	c := pod.Containers[0]
	if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
		t.Error("the corral container is not privileged: sandboxes need namespaces, cgroups, mounts and loop devices")
	}
	if c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem {
		t.Error("the corral container's root is writable")
	}
	if init := pod.InitContainers[0]; init.SecurityContext == nil || init.SecurityContext.Privileged != nil ||
		init.SecurityContext.Capabilities == nil || len(init.SecurityContext.Capabilities.Drop) != 1 {
		t.Error("the config check container has privileges it does not need")
	}
	for name, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		want := "/healthz"
		if name == "readiness" {
			want = "/readyz"
		}
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != want || p.HTTPGet.Port.String() != "http" {
			t.Errorf("%s probe %+v, want GET %s on the http port", name, p, want)
		}
	}
	if want := []string{"sleep", fmt.Sprint(drain["preStopSleepSeconds"])}; c.Lifecycle == nil || c.Lifecycle.PreStop == nil ||
		c.Lifecycle.PreStop.Exec == nil || !cmp.Equal(c.Lifecycle.PreStop.Exec.Command, want) {
		t.Errorf("preStop %+v, want exec %v", c.Lifecycle, want)
	}
	if got := envValue(c.Env, "CORRAL_DRAIN_TIMEOUT"); got != fmt.Sprintf("%ds", drain["timeoutSeconds"]) {
		t.Errorf("CORRAL_DRAIN_TIMEOUT %q", got)
	}
	pdb := objs.get(t, "PodDisruptionBudget", release).(*policyv1.PodDisruptionBudget)
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget maxUnavailable %v", pdb.Spec.MaxUnavailable)
	}
	if !cmp.Equal(pdb.Spec.Selector.MatchLabels, ss.Spec.Selector.MatchLabels) {
		t.Errorf("the PodDisruptionBudget selects %v, the pods are %v", pdb.Spec.Selector.MatchLabels, ss.Spec.Selector.MatchLabels)
	}
	svc := objs.get(t, "Service", release).(*corev1.Service)
	if !cmp.Equal(svc.Spec.Selector, ss.Spec.Selector.MatchLabels) {
		t.Errorf("the Service selects %v", svc.Spec.Selector)
	}
	if headless := objs.get(t, "Service", release+"-nodes").(*corev1.Service); headless.Spec.ClusterIP != "None" || ss.Spec.ServiceName != headless.Name {
		t.Errorf("headless service %q (clusterIP %q), StatefulSet serviceName %q", headless.Name, headless.Spec.ClusterIP, ss.Spec.ServiceName)
	}
	if sm, ok := objs["ServiceMonitor/"+release].(*monitoringv1.ServiceMonitor); ok {
		if sm.Spec.Endpoints[0].Path != "/metrics" || sm.Spec.Endpoints[0].Port != "http" {
			t.Errorf("ServiceMonitor endpoint %+v", sm.Spec.Endpoints[0])
		}
	}
}

func envValue(env []corev1.EnvVar, name string) string {
	for _, e := range env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// checkConfig assembles the configuration as the pod's init container does
// (the ConfigMap's corral.toml, then the tenants Secret's tenants.toml) with
// the container's environment, and runs corral config check on it.
func checkConfig(t *testing.T, objs objects, secrets map[string]string, want []string) {
	t.Helper()
	cm := objs.get(t, "ConfigMap", release).(*corev1.ConfigMap)
	tenants := objs.get(t, "Secret", release+"-tenants").(*corev1.Secret)
	envSecret := objs.get(t, "Secret", release+"-env").(*corev1.Secret)
	ss := objs.get(t, "StatefulSet", release).(*appsv1.StatefulSet)
	file := filepath.Join(t.TempDir(), "corral.toml")
	if err := os.WriteFile(file, []byte(cm.Data["corral.toml"]+tenants.StringData["tenants.toml"]), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
	for k, v := range envSecret.StringData {
		env = append(env, k+"="+v)
	}
	for _, e := range ss.Spec.Template.Spec.Containers[0].Env {
		switch {
		case e.ValueFrom == nil:
			env = append(env, e.Name+"="+e.Value)
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			env = append(env, e.Name+"="+ss.Name+"-0")
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			v, ok := secrets[ref.Name+"/"+ref.Key]
			if !ok {
				t.Fatalf("env %s names Secret %s key %s: add a stand-in to the case", e.Name, ref.Name, ref.Key)
			}
			env = append(env, e.Name+"="+v)
		default:
			t.Fatalf("env %s: unexpected source %+v", e.Name, e.ValueFrom)
		}
	}
	sort.Strings(env)
	args := append([]string{"config", "check"}, ss.Spec.Template.Spec.Containers[0].Args[1:]...)
	args[len(args)-1] = file // --config /run/corral/corral.toml, here
	cmd := exec.Command(corralBinary(t), args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("corral %s: %v\n%s\nconfiguration:\n%s", strings.Join(args, " "), err, out, readFile(file))
	}
	for _, w := range want {
		if !strings.Contains(string(out), w) {
			t.Errorf("corral config check said %q, want %q in it", out, w)
		}
	}
	t.Logf("corral %s: %s", strings.Join(args, " "), out)
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

var (
	buildOnce sync.Once
	built     string
	buildErr  error
)

// corralBinary is CORRAL_BIN (make passes bin/corral, the binary the image
// contains) or one built from this checkout.
func corralBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CORRAL_BIN"); p != "" {
		return p
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "corral-helm-test-")
		if err != nil {
			buildErr = err
			return
		}
		built = filepath.Join(dir, "corral")
		root, _ := filepath.Abs("../../..")
		cmd := exec.Command("go", "build", "-trimpath", "-o", built, "./cmd/corral")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("%v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatalf("build corral: %v", buildErr)
	}
	return built
}

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if built != "" {
		os.RemoveAll(filepath.Dir(built))
	}
	os.Exit(code)
}
