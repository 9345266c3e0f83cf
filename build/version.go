package build

import (
	"strconv"
	"strings"
)

// Version is the globalmirror release these binaries are: make build and
// the images set it to the chart's appVersion (-ldflags -X
// github.com/globalmirror/globalmirror/build.Version=...); "dev" where
// nothing did, as in go test.
var Version = "dev"

// Skew is how many minor releases a and b are apart: 0 for the same minor
// (or where either is "dev" or no MAJOR.MINOR.PATCH, so nothing can be
// said), 1 for adjacent minors, and 2 for more, or another major.
func Skew(a, b string) int {
	ma, na, okA := majorMinor(a)
	mb, nb, okB := majorMinor(b)
	switch {
	case !okA || !okB:
		return 0
	case ma != mb:
		return 2
	}
	return min(max(na-nb, nb-na), 2)
}

func majorMinor(v string) (major, minor int, ok bool) {
	parts := strings.Split(strings.TrimPrefix(v, "v"), ".")
	if len(parts) != 3 {
		return 0, 0, false
	}
	major, errMajor := strconv.Atoi(parts[0])
	minor, errMinor := strconv.Atoi(parts[1])
	return major, minor, errMajor == nil && errMinor == nil
}

// Released says whether Version is a release (MAJOR.MINOR.PATCH), which
// has a tag of its own, rather than "dev".
func Released() bool {
	_, _, ok := majorMinor(Version)
	return ok
}
