package localkube

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

const (
	readyPoll    = 50 * time.Millisecond
	readyTimeout = 90 * time.Second
)

func waitAPIReady(ctx context.Context, client kubernetes.Interface) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, readyPoll, readyTimeout, true, func(ctx context.Context) (bool, error) {
		_, last = client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return last == nil, nil
	})
	if err != nil && last != nil {
		return fmt.Errorf("%w: %w", err, last)
	}
	return err
}

// waitControllerManagerReady waits for /healthz and for the first thing the
// controllers do, the `default` ServiceAccount: pods cannot be created before
// it exists.
func waitControllerManagerReady(ctx context.Context, c *Cluster) error {
	// The serving certificate is self-signed; this checks liveness only.
	httpc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback health probe
	}}
	defer httpc.CloseIdleConnections()
	var last error
	err := wait.PollUntilContextTimeout(ctx, readyPoll, readyTimeout, true, func(ctx context.Context) (bool, error) {
		if done, err := c.kcm.Exited(); done {
			return false, fmt.Errorf("exited: %v", err)
		}
		resp, err := httpc.Get(c.kcmHealthz) // within httpc's timeout
		if err != nil {
			last = err
			return false, nil
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			last = fmt.Errorf("/healthz: %s", resp.Status)
			return false, nil
		}
		_, last = c.Client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		return last == nil, nil
	})
	if err != nil && last != nil {
		return fmt.Errorf("%w: %w", err, last)
	}
	return err
}

// createNode creates the Ready Node that pods are bound to. No kubelet runs, so
// nothing heartbeats it, and no node-lifecycle controller runs to notice.
func createNode(ctx context.Context, client kubernetes.Interface) error {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:   NodeName,
			Labels: map[string]string{corev1.LabelHostname: NodeName},
		},
	}
	created, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("node %s: %w", NodeName, err)
	}
	now := metav1.Now()
	created.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue,
		Reason: "LocalkubeNode", Message: "no kubelet; pods are simulated",
		LastHeartbeatTime: now, LastTransitionTime: now,
	}}
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("node %s status: %w", NodeName, err)
	}
	return nil
}

// StreamsLists reports whether the API server streams lists (a watch with
// sendInitialEvents, KEP-3157): 1.32 and 1.34 on do; 1.31 and older, and
// 1.33, whose feature gate went back to off, refuse it. It asks with a
// watch of its own, as an independent check of which path a feed takes.
func StreamsLists(ctx context.Context, client kubernetes.Interface) (bool, error) {
	yes := true
	w, err := client.CoreV1().Namespaces().Watch(ctx, metav1.ListOptions{SendInitialEvents: &yes,
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true})
	if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	w.Stop()
	return true, nil
}

// StreamsListsAsReleased is StreamsLists, failing where the API server's
// answer is not its release's (see StreamsLists): a test of the version
// matrix then proves both which release answered and which path it took.
func StreamsListsAsReleased(ctx context.Context, client kubernetes.Interface) (bool, error) {
	v, err := client.Discovery().ServerVersion()
	if err != nil {
		return false, err
	}
	minor, err := strconv.Atoi(strings.TrimRight(v.Minor, "+"))
	if err != nil {
		return false, fmt.Errorf("localkube: minor version %q: %w", v.Minor, err)
	}
	streams, err := StreamsLists(ctx, client)
	if err != nil {
		return false, err
	}
	if want := minor == 32 || minor >= 34; streams != want {
		return false, fmt.Errorf("localkube: %s streams lists: %v; its release: %v", v.GitVersion, streams, want)
	}
	return streams, nil
}

// IsStreamedList reports whether r asks for a streamed list: a watch with
// sendInitialEvents.
func IsStreamedList(r *http.Request) bool {
	q := r.URL.Query()
	return q.Get("watch") == "true" && q.Get("sendInitialEvents") == "true"
}

// RefuseStreamedList answers a streamed list as an API server that does not
// stream lists does (422: Kubernetes 1.31 and older, and 1.33), so that a
// feed takes the paged path (the list API).
func RefuseStreamedList(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnprocessableEntity)
	_ = json.NewEncoder(w).Encode(&metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusFailure, Reason: metav1.StatusReasonInvalid, Code: http.StatusUnprocessableEntity,
		Message: "sendInitialEvents is forbidden (the test streams no lists)"})
}
