package pgtest

import (
	"context"
	"log/slog"
)

// LogSignal returns a logger that sends the value of every integer attribute
// named key it logs, at any level, on the returned channel (dropping values
// while one is unread): a test waits on it for the code to have logged, say,
// a background purge, instead of polling.
func LogSignal(key string) (*slog.Logger, <-chan int64) {
	ch := make(chan int64, 1)
	return slog.New(signalHandler{key: key, ch: ch}), ch
}

type signalHandler struct {
	key string
	ch  chan int64
}

func (h signalHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h signalHandler) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == h.key && a.Value.Kind() == slog.KindInt64 {
			select {
			case h.ch <- a.Value.Int64():
			default:
			}
		}
		return true
	})
	return nil
}

func (h signalHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h signalHandler) WithGroup(string) slog.Handler      { return h }
