package integration

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/globalmirror/globalmirror/kubeclient"
	"github.com/globalmirror/globalmirror/test/localkube"
	"k8s.io/client-go/rest"
)

// feeds counts what each feed of a Source does, through Config.Counters,
// which the source asks once per feed (Counters: fs.counters).
type feeds struct {
	mu  sync.Mutex
	all []*feed
}

// feed is one feed's counts: its full lists by path, the path of its last,
// and the objects it found current.
type feed struct {
	resource                 string
	streamed, paged, current counter
	last                     atomic.Value // kubeclient.Path
}

// listCounter counts a feed's lists of one path.
type listCounter struct {
	f    *feed
	path kubeclient.Path
	n    *counter
}

func (c listCounter) Inc() {
	c.n.Inc()
	c.f.last.Store(c.path)
}

func (fs *feeds) counters(resource string) kubeclient.Counters {
	f := &feed{resource: resource}
	fs.mu.Lock()
	fs.all = append(fs.all, f)
	fs.mu.Unlock()
	return kubeclient.Counters{Streamed: listCounter{f, kubeclient.Streamed, &f.streamed},
		Paged: listCounter{f, kubeclient.Paged, &f.paged}, Current: &f.current}
}

func (fs *feeds) each(fn func(*feed)) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for _, f := range fs.all {
		fn(f)
	}
}

// lists is how many full lists each feed has ended, the fewest of any feed.
func (fs *feeds) lists() int64 {
	least := int64(-1)
	fs.each(func(f *feed) {
		if n := f.streamed.Load() + f.paged.Load(); least < 0 || n < least {
			least = n
		}
	})
	return least
}

// count sums what (streamed, paged or current) over the feeds of resource.
func (fs *feeds) count(resource, what string) int64 {
	var n int64
	fs.each(func(f *feed) {
		if f.resource == resource {
			n += map[string]*counter{"streamed": &f.streamed, "paged": &f.paged, "current": &f.current}[what].Load()
		}
	})
	return n
}

// paths are the paths the feeds' last lists took, each once, sorted; a feed
// that has not listed yet adds "".
func (fs *feeds) paths() []kubeclient.Path {
	var paths []kubeclient.Path
	fs.each(func(f *feed) {
		p, _ := f.last.Load().(kubeclient.Path)
		if !slices.Contains(paths, p) {
			paths = append(paths, p)
		}
	})
	slices.Sort(paths)
	return paths
}

// counter is a metric's counter.
type counter struct{ atomic.Int64 }

func (c *counter) Inc() { c.Add(1) }

// refusingStreamedLists is cfg whose API server refuses streamed lists, as
// Kubernetes 1.31 and 1.33 do: feeds on it take the paged path.
func refusingStreamedLists(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			if !localkube.IsStreamedList(r) {
				return next.RoundTrip(r)
			}
			w := httptest.NewRecorder()
			localkube.RefuseStreamedList(w)
			return w.Result(), nil
		})
	})
	return cfg
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
