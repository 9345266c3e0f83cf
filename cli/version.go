package cli

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"regexp"
	"runtime"
	"slices"
	"strings"

	"github.com/globalmirror/globalmirror/build"
)

// Versions are the command's release and those both halves run, judged as
// check judges them.
type Versions struct {
	Command   string `json:"command"`
	GoVersion string `json:"goVersion"`
	// Controller and ClusterDNS are each running pod's release, by pod;
	// "" where its metrics do not say.
	Controller map[string]string `json:"controller,omitempty"`
	ClusterDNS map[string]string `json:"clusterDNS,omitempty"`
	// Skew is the command's judgement of them: ok, warning (a minor apart,
	// or unsaid) or error (further apart), as check's.
	Skew Result `json:"skew"`
	// Unread says what could not be read, and why.
	Unread []string `json:"unread,omitempty"`
}

// CommandVersions are the command's own, with nothing read of a cluster.
func CommandVersions() Versions {
	return Versions{Command: build.Version, GoVersion: runtime.Version()}
}

// ReadVersions reads the release each running replica of both halves
// says in its build_info metric (through the API server's pod proxy, as
// check does) and judges the skew.
func ReadVersions(ctx context.Context, cl *Cluster) Versions {
	v := CommandVersions()
	ok := result(CategoryKubernetes, "version skew", OK, "every half read runs this command's minor release", "")
	v.Skew = ok
	judge := func(metric string, metrics map[string]string) map[string]string {
		if r := versionSkew(ok, metric, metrics); r.Result != OK && (v.Skew.Result == OK || r.Result == Error) {
			v.Skew = r
		}
		return releases(metric, metrics)
	}
	switch {
	case cl.ControllerErr != nil:
		v.Unread = append(v.Unread, "the controller: "+cl.ControllerErr.Error())
	case cl.Controller == nil:
		v.Unread = append(v.Unread, "the controller: none found")
	default:
		v.Controller = judge("globalmirror_build_info", controllerMetrics(ctx, cl))
	}
	switch {
	case cl.DNSErr != nil:
		v.Unread = append(v.Unread, "the cluster DNS: "+cl.DNSErr.Error())
	default:
		// The pods that run the plugin: the chart's forwarded DNS's in
		// forwarded mode.
		pods := cl.judged().Pods
		bodies, errs := podMetrics(ctx, cl, pods, metricsPort)
		metrics := map[string]string{}
		for i, p := range pods {
			if errs[i] != nil {
				v.Unread = append(v.Unread, fmt.Sprintf("the cluster DNS pod %s: %s", p.Name, errMessage(errs[i])))
			} else if strings.Contains(string(bodies[i]), "coredns_global_build_info") {
				metrics[p.Name] = string(bodies[i])
			}
		}
		v.ClusterDNS = judge("coredns_global_build_info", metrics)
	}
	if len(v.Unread) > 0 && v.Skew.Result == OK {
		v.Skew = result(CategoryKubernetes, "version skew", Warning, "not every half could be read: "+strings.Join(v.Unread, "; "),
			"globalmirror check says what it could not read, and why")
	}
	return v
}

// releases are the version labels of metric in each pod's metrics.
func releases(metric string, metrics map[string]string) map[string]string {
	find := regexp.MustCompile(regexp.QuoteMeta(metric) + `\{[^}]*\bversion="([^"]*)"`)
	out := map[string]string{}
	for pod, body := range metrics {
		if m := find.FindStringSubmatch(body); m != nil {
			out[pod] = m[1]
		} else {
			out[pod] = ""
		}
	}
	return out
}

// Write says v as `globalmirror version` does.
func (v Versions) Write(w io.Writer) {
	fmt.Fprintf(w, "globalmirror %s (%s)\n", v.Command, v.GoVersion)
	for _, half := range []struct {
		name string
		pods map[string]string
	}{{"controller", v.Controller}, {"cluster DNS", v.ClusterDNS}} {
		for _, pod := range slices.Sorted(maps.Keys(half.pods)) {
			fmt.Fprintf(w, "%s %s: %s\n", half.name, pod, cmp.Or(half.pods[pod], "unsaid"))
		}
	}
	if v.Skew.Check != "" {
		fmt.Fprintf(w, "%s %s\n", marks[v.Skew.Result], v.Skew.Detail)
		if v.Skew.Result != OK && v.Skew.Hint != "" {
			fmt.Fprintf(w, "    hint: %s\n", v.Skew.Hint)
		}
	}
}
