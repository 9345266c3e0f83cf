//go:build unix

package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
)

// Credentials runs cfg's exec credential plugin (a kubeconfig's
// users[].user.exec, the way EKS, GKE and AKS log in) itself and returns cfg
// with what it answered in the plugin's place. client-go runs the plugin
// with no deadline, handing it the command's own stderr: one that never
// returns outlived the command and held its output open, so that a script's
// `out=$(globalmirror check 2>&1)` waited for it. Here it runs bounded by
// ctx, in a process group of its own, killed whole once it has answered or
// ctx ends, and nothing it leaves can hold the command's output: its stderr
// reaches the command's through a pipe the command stops reading at once.
func Credentials(ctx context.Context, cfg *rest.Config) (*rest.Config, error) {
	ec := cfg.ExecProvider
	if ec == nil {
		return cfg, nil
	}
	info, err := json.Marshal(map[string]any{"apiVersion": ec.APIVersion, "kind": "ExecCredential",
		"spec": map[string]any{"interactive": false}})
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(ec.Command, ec.Args...)
	cmd.Env = append(os.Environ(), "KUBERNETES_EXEC_INFO="+string(info))
	for _, e := range ec.Env {
		cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
	}
	var out bytes.Buffer
	// Not the file itself: a pipe, whose reading ends at WaitDelay.
	cmd.Stdout, cmd.Stderr = &out, struct{ io.Writer }{os.Stderr}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 100 * time.Millisecond // what the group's orphans hold open is not waited for
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("the kubeconfig's credential plugin (users[].user.exec) %s: %w", ec.Command, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	kill := func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	select {
	case err = <-done:
		kill() // what it started and left
	case <-ctx.Done():
		kill()
		<-done
		return nil, fmt.Errorf("no answer before the timeout from the kubeconfig's credential plugin (users[].user.exec) %s: %w", ec.Command, ctx.Err())
	}
	if err != nil && !errors.Is(err, exec.ErrWaitDelay) {
		return nil, fmt.Errorf("the kubeconfig's credential plugin (users[].user.exec) %s: %w", ec.Command, err)
	}
	var cred struct {
		Status struct {
			Token                 string `json:"token"`
			ClientCertificateData string `json:"clientCertificateData"`
			ClientKeyData         string `json:"clientKeyData"`
		} `json:"status"`
	}
	if err := json.Unmarshal(out.Bytes(), &cred); err != nil {
		return nil, fmt.Errorf("the kubeconfig's credential plugin (users[].user.exec) %s answered no ExecCredential: %w", ec.Command, err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.ExecProvider = nil
	cfg.BearerToken = cred.Status.Token
	if cred.Status.ClientCertificateData != "" {
		cfg.CertData, cfg.KeyData = []byte(cred.Status.ClientCertificateData), []byte(cred.Status.ClientKeyData)
	}
	return cfg, nil
}
