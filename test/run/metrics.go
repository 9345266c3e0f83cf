package run

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Samples are one scrape of a Prometheus text endpoint, by series
// (`name{labels}` as exposed).
type Samples map[string]float64

// Scrape reads a Prometheus text endpoint. It asks for the text as is: a
// compressed answer costs the scraped process a compressor (about a
// megabyte of heap) per scrape, which would show in what the benchmarks
// measure of its heap.
func Scrape(url string) (Samples, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	s, err := ParseSamples(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	return s, nil
}

// ParseSamples reads the Prometheus text format.
func ParseSamples(r io.Reader) (Samples, error) {
	s := Samples{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", line, err)
		}
		s[line[:i]] = v
	}
	return s, sc.Err()
}

// Sum adds every series of the metric name whose labels contain all of match
// (each a `key="value"` string).
func (s Samples) Sum(name string, match ...string) float64 {
	var sum float64
	for series, v := range s {
		n, labels, _ := strings.Cut(series, "{")
		if n == name && !slices.ContainsFunc(match, func(m string) bool { return !strings.Contains(labels, m) }) {
			sum += v
		}
	}
	return sum
}

// MetricSum scrapes url and sums every sample of one metric family whose
// labels contain all of match.
func MetricSum(url, name string, match ...string) (float64, error) {
	s, err := Scrape(url)
	if err != nil {
		return 0, err
	}
	return s.Sum(name, match...), nil
}
