package options

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestDefaults(t *testing.T) {
	o, _, err := Parse("c", nil)
	if err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	if o.Suffix != "-global" || o.LocalSelector != "mirror.linkerd.io/exported" ||
		o.MaxEndpointsPerSlice != 100 || !o.LeaderElect || o.MetricsAddr != ":8080" || len(o.Namespaces) != 0 {
		t.Errorf("unexpected defaults: %+v", o)
	}
	if o.Selector() == nil || o.Selector().String() != "mirror.linkerd.io/exported" {
		t.Errorf("selector = %v", o.Selector())
	}
}

func TestParse(t *testing.T) {
	o, _, err := Parse("c", []string{"--namespaces=a,b", "--suffix=-all", "--local-selector=none",
		"--max-endpoints-per-slice=7", "--leader-elect=false", "--metrics-addr=127.0.0.1:0", "--log-format=json",
		"--leader-elect-lease-duration=3s"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(o.Namespaces, ",") != "a,b" || o.Suffix != "-all" || o.Selector() != nil ||
		o.MaxEndpointsPerSlice != 7 || o.LeaderElect || o.LogFormat != "json" || o.LeaseDuration != 3*time.Second {
		t.Errorf("parsed %+v", o)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		args []string
		want string // substring of the error
	}{
		{[]string{"--namespaces=Bad_NS"}, "--namespaces"},
		{[]string{"--suffix="}, "--suffix \"\": must not be empty"},
		{[]string{"--suffix=_x"}, "--suffix"},
		{[]string{"--local-selector=a in (b"}, "--local-selector"},
		{[]string{"--local-selector="}, `selects every headless service ("none" leaves local services out)`},
		{[]string{"--include-local=false"}, "unknown flag"},
		{[]string{"--max-endpoints-per-slice=0"}, "between 1 and 1000"},
		{[]string{"--max-endpoints-per-slice=1001"}, "between 1 and 1000"},
		{[]string{"--kube-api-qps=0"}, "--kube-api-qps"},
		{[]string{"--kube-api-qps=20", "--kube-api-burst=0"}, "--kube-api-burst"},
		{[]string{"--workers=0"}, "--workers"},
		{[]string{"--leader-elect-id=Not OK"}, "--leader-elect-id"},
		{[]string{"--leader-elect-lease-duration=5s", "--leader-elect-renew-deadline=5s"}, "must be longer than --leader-elect-renew-deadline"},
		{[]string{"--leader-elect-renew-deadline=2s", "--leader-elect-retry-period=2s"}, "1.2 x"},
		{[]string{"--metrics-addr=8080"}, "--metrics-addr"},
		{[]string{"--log-format=xml"}, "--log-format"},
		{[]string{"--log-level=loud"}, "--log-level"},
		{[]string{"extra"}, "unexpected arguments"},
		{[]string{"--no-such-flag"}, "unknown flag"},
	}
	for _, tc := range tests {
		_, _, err := Parse("c", tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want it to mention %q", tc.args, err, tc.want)
		}
	}
	// Leader-election timing is not checked when election is off.
	if _, _, err := Parse("c", []string{"--leader-elect=false", "--leader-elect-renew-deadline=1h"}); err != nil {
		t.Errorf("timing checked without leader election: %v", err)
	}
}

func TestHelpExplainsEveryFlag(t *testing.T) {
	_, fs, err := Parse("globalmirror-controller", []string{"--help"})
	if !errors.Is(err, pflag.ErrHelp) {
		t.Fatalf("err = %v, want ErrHelp", err)
	}
	var out bytes.Buffer
	fs.SetOutput(&out)
	fs.Usage()
	for _, f := range []string{"kubeconfig", "namespaces", "suffix", "local-selector",
		"max-endpoints-per-slice", "kube-api-qps", "kube-api-burst", "workers", "leader-elect",
		"leader-elect-namespace", "leader-elect-id", "leader-elect-lease-duration", "leader-elect-renew-deadline",
		"leader-elect-retry-period", "metrics-addr", "log-format", "log-level"} {
		if !strings.Contains(out.String(), "--"+f+" ") {
			t.Errorf("help does not mention --%s", f)
		}
		if fl := fs.Lookup(f); fl == nil || len(fl.Usage) < 15 {
			t.Errorf("--%s has no real explanation", f)
		}
	}
}

func TestLeaseNamespace(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "from-env")
	if got := (Options{}).LeaseNamespace(); got != "from-env" {
		t.Errorf("LeaseNamespace = %q", got)
	}
	if got := (Options{LeaderElectNamespace: "flag"}).LeaseNamespace(); got != "flag" {
		t.Errorf("LeaseNamespace = %q", got)
	}
}
