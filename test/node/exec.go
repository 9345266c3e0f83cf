package node

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"
)

// Exec runs command in a pod of one container, as `kubectl exec` does:
// through the API server, which the kubelet streams it to from containerd. It
// returns stdout; stderr is in the error.
func (n *Node) Exec(ctx context.Context, namespace, pod string, command ...string) (string, error) {
	return n.ExecIn(ctx, namespace, pod, "", command...)
}

// ExecIn is Exec in the named container of a pod.
func (n *Node) ExecIn(ctx context.Context, namespace, pod, container string, command ...string) (string, error) {
	c := n.opts.Cluster
	req := c.Client.CoreV1().RESTClient().Post().Resource("pods").Namespace(namespace).Name(pod).
		SubResource("exec").VersionedParams(&corev1.PodExecOptions{
		Container: container,
		Command:   command,
		Stdout:    true,
		Stderr:    true,
	}, scheme.ParameterCodec)
	websocket, err := remotecommand.NewWebSocketExecutor(c.Config, "GET", req.URL().String())
	if err != nil {
		return "", err
	}
	spdy, err := remotecommand.NewSPDYExecutor(c.Config, "POST", req.URL())
	if err != nil {
		return "", err
	}
	exec, err := remotecommand.NewFallbackExecutor(websocket, spdy, httpstream.IsUpgradeFailure)
	if err != nil {
		return "", err
	}
	var stdout, stderr bytes.Buffer
	err = exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		return stdout.String(), fmt.Errorf("exec %s in %s/%s: %w: %s", strings.Join(command, " "), namespace, pod, err, stderr.String())
	}
	return stdout.String(), nil
}
