package obstest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Binaries the harness runs, each with the Debian package that has it.
var packages = map[string]string{
	"prometheus":                   "prometheus",
	"promtool":                     "prometheus",
	"prometheus-postgres-exporter": "prometheus-postgres-exporter",
}

// Binary returns the path of the program name, or an error that names the
// package to install: the harness never skips.
func Binary(name string) (string, error) {
	path, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s not found in PATH: run make deps (Debian package %s), or put it in PATH", name, packages[name])
	}
	return path, nil
}

// FreeAddr returns an address of 127.0.0.1 whose port was free a moment
// ago.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	addr := l.Addr().String()
	return addr, l.Close()
}

// Prometheus is a Prometheus server of the harness: a loopback port and a
// throwaway data directory.
type Prometheus struct {
	// URL is the server's base URL, http://127.0.0.1:PORT.
	URL string

	cmd    *exec.Cmd
	log    string // path of its log
	done   chan struct{}
	err    error // of Wait, once done
	client *http.Client
}

// StartPrometheus starts Prometheus with config (prometheus.yml's text) in
// dir, which holds its data and log, and waits until it is ready.
func StartPrometheus(ctx context.Context, dir, config string) (*Prometheus, error) {
	bin, err := Binary("prometheus")
	if err != nil {
		return nil, err
	}
	addr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o644); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "prometheus.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(bin,
		"--config.file="+cfgPath,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--log.level=warn",
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &Prometheus{
		URL: "http://" + addr, cmd: cmd, log: logPath, done: make(chan struct{}),
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}},
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := p.waitReady(ctx, 30*time.Second); err != nil {
		_ = p.Stop()
		return nil, err
	}
	return p, nil
}

// waitReady polls /-/ready until it answers 200, Prometheus exits, or
// within passes.
func (p *Prometheus) waitReady(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		resp, err := p.client.Get(p.URL + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.done:
			return fmt.Errorf("prometheus exited at start (%v): %s", p.err, p.LogTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("prometheus not ready after %v: %s", within, p.LogTail())
		}
	}
}

// Stop stops Prometheus (SIGTERM, SIGKILL after 10 s) and waits for it.
func (p *Prometheus) Stop() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	var exit *exec.ExitError
	if p.err != nil && !errors.As(p.err, &exit) {
		return p.err
	}
	return nil
}

// LogTail returns the end of Prometheus' log.
func (p *Prometheus) LogTail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Sample is one series of a query's result: its labels, and its value
// (instant query) or values (range query).
type Sample struct {
	Labels map[string]string
	Value  float64
	Values []Point
}

// Point is one value of a range query's series.
type Point struct {
	T time.Time
	V float64
}

// apiResult is the body of Prometheus' query API.
type apiResult struct {
	Status string `json:"status"`
	Error  string `json:"error"`
	Data   struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
			Values [][2]any          `json:"values"`
		} `json:"result"`
	} `json:"data"`
}

// Query runs an instant query now.
func (p *Prometheus) Query(ctx context.Context, query string) ([]Sample, error) {
	return p.api(ctx, "/api/v1/query", url.Values{"query": {query}})
}

// QueryRange runs a range query from start to end at step.
func (p *Prometheus) QueryRange(ctx context.Context, query string, start, end time.Time, step time.Duration) ([]Sample, error) {
	return p.api(ctx, "/api/v1/query_range", url.Values{
		"query": {query},
		"start": {unixText(start)}, "end": {unixText(end)},
		"step": {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)},
	})
}

func unixText(t time.Time) string {
	return strconv.FormatFloat(float64(t.UnixNano())/1e9, 'f', 3, 64)
}

func (p *Prometheus) api(ctx context.Context, path string, params url.Values) ([]Sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.URL+path, strings.NewReader(params.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var r apiResult
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("%s %q: HTTP %d, %v: %s", path, params.Get("query"), resp.StatusCode, err, body)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s %q: %s", path, params.Get("query"), r.Error)
	}
	var out []Sample
	for _, res := range r.Data.Result {
		s := Sample{Labels: res.Metric}
		if res.Value[1] != nil {
			if s.Value, err = point(res.Value); err != nil {
				return nil, err
			}
		}
		for _, v := range res.Values {
			f, err := point(v)
			if err != nil {
				return nil, err
			}
			ts, _ := v[0].(float64)
			s.Values = append(s.Values, Point{T: time.Unix(0, int64(ts*1e9)), V: f})
		}
		out = append(out, s)
	}
	return out, nil
}

// point parses the value of a [timestamp, "value"] pair.
func point(v [2]any) (float64, error) {
	s, ok := v[1].(string)
	if !ok {
		return 0, fmt.Errorf("value %v is not a string", v[1])
	}
	return strconv.ParseFloat(s, 64)
}
