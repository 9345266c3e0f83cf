package global

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

// withLogger is ctx carrying the plugin's logger for klog's contextual
// logging, through which the index's feeds (package kubeclient) and
// client-go's watches under them log. Their lines are then the plugin's,
// "[INFO] plugin/global: ...": CoreDNS's kubernetes plugin makes klog's
// global logger its own, so they would otherwise read as its lines.
func withLogger(ctx context.Context) context.Context {
	return klog.NewContext(ctx, logr.New(&klogSink{}))
}

// klogSink is a logr.LogSink writing to the plugin's log: messages, then
// the error, then key=value pairs, as klog prints them. Only what klog logs
// by default (verbosity 0) is written.
type klogSink struct {
	values []any
}

func (*klogSink) Init(logr.RuntimeInfo) {}

func (*klogSink) Enabled(level int) bool { return level == 0 }

func (s *klogSink) Info(_ int, msg string, kv ...any) { log.Info(s.line(msg, nil, kv)) }

func (s *klogSink) Error(err error, msg string, kv ...any) { log.Error(s.line(msg, err, kv)) }

func (s *klogSink) WithValues(kv ...any) logr.LogSink {
	return &klogSink{values: append(slices.Clip(s.values), kv...)}
}

func (s *klogSink) WithName(string) logr.LogSink { return s }

func (s *klogSink) line(msg string, err error, kv []any) string {
	var b strings.Builder
	b.WriteString(msg)
	if err != nil {
		b.WriteString(": ")
		b.WriteString(err.Error())
	}
	kv = append(slices.Clip(s.values), kv...)
	for i := 0; i < len(kv); i += 2 {
		var v any = "(MISSING)"
		if i+1 < len(kv) {
			v = kv[i+1]
		}
		if e, ok := v.(error); ok {
			v = e.Error()
		}
		if str, ok := v.(string); ok {
			fmt.Fprintf(&b, " %v=%q", kv[i], str)
		} else {
			fmt.Fprintf(&b, " %v=%v", kv[i], v)
		}
	}
	return b.String()
}
