package options

import (
	"io"
	"log/slog"
)

// Level parses --log-level.
func (o Options) Level() (slog.Level, error) {
	var l slog.Level
	err := l.UnmarshalText([]byte(o.LogLevel))
	return l, err
}

// Logger is the process logger --log-format and --log-level ask for.
func (o Options) Logger(w io.Writer) *slog.Logger {
	level, _ := o.Level()
	opts := &slog.HandlerOptions{Level: level}
	if o.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
