// Command demo runs globalmirror end to end on one machine: three local
// clusters (source, east, west), a 3-replica StatefulSet-like `db` exported in
// each, Linkerd's service mirror (simulated) mirroring east and west into
// source, the controller, and the custom CoreDNS answering on 127.0.0.1. It
// prints dig commands with their answers, opts db into native names (and
// digs db itself), and stays up until Ctrl-C
// (DEMO_EXIT=1: exit after printing). Everything it starts stops with it.
//
// DEMO_TOPOLOGY=mesh runs a symmetric mesh instead, as users run Linkerd
// multicluster: east, west and north, each exporting db, each linked to the
// other two, each with its own controller and CoreDNS (on DEMO_DNS_PORT,
// +1 and +2).
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/globalmirror/globalmirror/aggregate"
	"github.com/globalmirror/globalmirror/test/localkube"
	"github.com/globalmirror/globalmirror/test/run"
	"github.com/globalmirror/globalmirror/test/scenario"
	"github.com/globalmirror/globalmirror/test/workload"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

const (
	namespace = "demo"
	// answerTimeout bounds the wait for the mirrors and local pods to answer.
	answerTimeout = 60 * time.Second
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := demo(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		stop()
		os.Exit(1)
	}
}

func demo(ctx context.Context) error {
	port, err := strconv.Atoi(cmp.Or(os.Getenv("DEMO_DNS_PORT"), "1053"))
	if err != nil || port <= 0 || port > 65535 {
		return fmt.Errorf("DEMO_DNS_PORT=%q is not a port", os.Getenv("DEMO_DNS_PORT"))
	}
	dir := cmp.Or(os.Getenv("DEMO_DIR"), filepath.Join(os.TempDir(), "globalmirror-demo"))
	if err := os.RemoveAll(dir); err != nil { // localkube.Start makes it again
		return err
	}
	log := localkube.StderrLogger(false)
	switch t := os.Getenv("DEMO_TOPOLOGY"); t {
	case "", "star":
	case "mesh":
		return mesh(ctx, dir, port, log)
	default:
		return fmt.Errorf("DEMO_TOPOLOGY=%q: star (the default) or mesh", t)
	}

	env, err := startClusters(ctx, dir, log, []string{"source", "east", "west"}, []string{"192.0.2.0/25", "198.51.100.0/24", "203.0.113.0/24"})
	if err != nil {
		return err
	}
	defer env.Stop()
	source := env.Cluster("source")
	step("linking east and west (mirroring their exported services into source, as Linkerd does), "+
		"starting the globalmirror controller and CoreDNS with the global plugin on 127.0.0.1:%d", port)
	world, coredns, err := serve(ctx, env, "source", []string{"east", "west"}, dir, port, log)
	defer world.Stop()
	if err != nil {
		return err
	}

	global := world.FQDN("db-global")
	if err := scenario.AwaitRecords(ctx, coredns.Addr, global, 9, answerTimeout); err != nil {
		return err
	}
	if err := printObjects(ctx, source); err != nil {
		return err
	}
	if err := dig(ctx, port, []string{global}, []string{"db-0-east." + global}, []string{"SRV", "_db._tcp." + global}); err != nil {
		return err
	}

	step("opting db into native names: annotating source's db %s=true", aggregate.AnnotationIncludeMirrors)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"true"}}}`, aggregate.AnnotationIncludeMirrors)
	if _, err := source.Client.CoreV1().Services(namespace).Patch(ctx, "db", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return err
	}
	native := world.FQDN("db")
	if err := scenario.AwaitRecords(ctx, coredns.Addr, native, 9, answerTimeout); err != nil {
		return err
	}
	if err := dig(ctx, port, []string{"+short", native}, []string{"db-0-west." + native}); err != nil {
		return err
	}
	return stayUp(ctx, dir, "source", "east", "west")
}

// stayUp says where the clusters' kubeconfigs are, and returns at once
// with DEMO_EXIT=1, else at Ctrl-C.
func stayUp(ctx context.Context, dir string, clusters ...string) error {
	fmt.Printf("\nKubeconfigs: %s/{%s}.kubeconfig\n", dir, strings.Join(clusters, ","))
	if os.Getenv("DEMO_EXIT") == "1" {
		return nil
	}
	fmt.Println("Up. Try the dig commands above; Ctrl-C stops everything.")
	<-ctx.Done()
	fmt.Println("\nstopping")
	return nil
}

// mesh runs east, west and north, each linked to the other two, each with
// its own controller and CoreDNS: every cluster has one db-global of nine
// addresses, its own pods under their own names (db-0) and the others' with
// their cluster's (db-0-west).
func mesh(ctx context.Context, dir string, port int, log *slog.Logger) error {
	names := []string{"east", "west", "north"}
	env, err := startClusters(ctx, dir, log, names, []string{"198.51.100.0/24", "203.0.113.0/24", "192.0.2.0/25"})
	if err != nil {
		return err
	}
	defer env.Stop()

	global := "db-global." + namespace + ".svc.cluster.local."
	addrs := map[string]string{}
	for i, name := range names {
		others := slices.DeleteFunc(slices.Clone(names), func(o string) bool { return o == name })
		step("%s: linking %s, starting its controller and its CoreDNS on 127.0.0.1:%d", name, strings.Join(others, " and "), port+i)
		world, coredns, err := serve(ctx, env, name, others, dir, port+i, log)
		defer world.Stop()
		if err != nil {
			return err
		}
		addrs[name] = coredns.Addr
	}
	for _, name := range names {
		if err := scenario.AwaitRecords(ctx, addrs[name], global, 9, answerTimeout); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	for i, name := range names {
		other := names[(i+1)%len(names)]
		fmt.Printf("\n# %s's DNS\n", name)
		if err := dig(ctx, port+i, []string{"+short", global}, []string{"db-0." + global}, []string{"db-0-" + other + "." + global}); err != nil {
			return err
		}
	}
	return stayUp(ctx, dir, names...)
}

// startClusters starts the clusters names and creates in each a 3-replica
// StatefulSet-like db, exported, whose pods take their addresses from the
// cluster's prefix.
func startClusters(ctx context.Context, dir string, log *slog.Logger, names, prefixes []string) (*localkube.Env, error) {
	step("starting clusters %s (logs in %s)", strings.Join(names, ", "), dir)
	env, err := localkube.Start(ctx, localkube.Options{Clusters: names, Dir: dir, Logger: log})
	if err != nil {
		return nil, err
	}
	step("creating a 3-replica StatefulSet-like db, exported, in each cluster")
	for i, name := range names {
		opts := workload.Options{Labels: map[string]string{aggregate.LabelExported: "true"}, IPv4: netip.MustParsePrefix(prefixes[i])}
		if _, err := workload.Create(ctx, env.Cluster(name).Client, namespace, "db", 3, opts); err != nil {
			env.Stop()
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	return env, nil
}

// serve links the clusters others into cluster name, as Linkerd's service
// mirror does, and starts name's controller and its CoreDNS with the demo
// Corefile on port. The world it returns is to be stopped, also after an error.
func serve(ctx context.Context, env *localkube.Env, name string, others []string, dir string, port int, log *slog.Logger) (*scenario.World, *run.CoreDNS, error) {
	world := scenario.NewWorld(env.Cluster(name), namespace, filepath.Join(dir, name))
	world.Logger = log.With("cluster", name)
	corefile, err := os.ReadFile("corefile/demo.Corefile") // make demo runs in the repository's root
	if err != nil {
		return world, nil, err
	}
	if err := os.MkdirAll(world.Dir, 0o755); err != nil {
		return world, nil, err
	}
	for _, o := range others {
		if err := world.Link(ctx, env.Cluster(o)); err != nil {
			return world, nil, err
		}
	}
	if _, err := world.StartController(ctx, "--leader-elect=false"); err != nil {
		return world, nil, err
	}
	coredns, err := world.RunCoreDNS(ctx, run.CoreDNSOptions{Corefile: string(corefile), Ports: map[string]int{"DNS_PORT": port}, WaitReady: true})
	return world, coredns, err
}

func step(format string, args ...any) {
	fmt.Printf("==> "+format+"\n", args...)
}

// printObjects shows what `kubectl get svc,endpointslices -n demo` would: the
// controller's global Service next to the mirrors.
func printObjects(ctx context.Context, source *localkube.Cluster) error {
	svcs, err := source.Client.CoreV1().Services(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	fmt.Printf("\n$ kubectl --kubeconfig source.kubeconfig -n %s get services,endpointslices\n", namespace)
	fmt.Printf("%-26s %-14s %-16s %s\n", "SERVICE", "CLUSTER-IP", "MANAGED-BY", "PORTS")
	for _, s := range svcs.Items {
		var ports []string
		for _, p := range s.Spec.Ports {
			ports = append(ports, fmt.Sprintf("%d/%s", p.Port, p.Protocol))
		}
		fmt.Printf("%-26s %-14s %-16s %s\n", "service/"+s.Name, s.Spec.ClusterIP, s.Labels[aggregate.LabelManagedBy], strings.Join(ports, ","))
	}
	slices, err := source.Client.DiscoveryV1().EndpointSlices(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: aggregate.LabelManagedBy + "=" + aggregate.ManagedBy,
	})
	if err != nil {
		return err
	}
	fmt.Printf("\n%-40s %-9s %s\n", "ENDPOINTSLICE (globalmirror)", "TYPE", "ENDPOINTS")
	for _, s := range slices.Items {
		var eps []string
		for _, e := range s.Endpoints {
			name := strings.Join(e.Addresses, ",")
			if e.Hostname != nil {
				name = *e.Hostname + "=" + name
			}
			eps = append(eps, name)
		}
		fmt.Printf("%-40s %-9s %s\n", "endpointslice/"+s.Name, s.AddressType, strings.Join(eps, " "))
	}
	return nil
}

// dig runs the real dig once per query, so the output is what a user would see.
func dig(ctx context.Context, port int, queries ...[]string) error {
	for _, q := range queries {
		all := append([]string{"@127.0.0.1", "-p", strconv.Itoa(port), "+noall", "+answer", "+additional"}, q...)
		fmt.Printf("\n$ dig %s\n", strings.Join(all, " "))
		cmd := exec.CommandContext(ctx, "dig", all...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			if _, ok := errors.AsType[*exec.Error](err); ok {
				return fmt.Errorf("dig not found: `make demo` installs it (Debian package dnsutils)")
			}
			return fmt.Errorf("dig: %w", err)
		}
	}
	return nil
}
