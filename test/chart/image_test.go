package chart

import (
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// TestDockerfileMatchesMakefile keeps the Dockerfile's defaults, which a
// plain `docker build` uses, equal to what `make build` uses. test/image runs
// the images `make image` builds (it passes the Makefile's flags) and finds
// their binaries identical to bin/'s.
func TestDockerfileMatchesMakefile(t *testing.T) {
	dockerfile, makefile := string(readFile(t, "../../Dockerfile")), string(readFile(t, "../../Makefile"))
	value := func(text, pattern string) string {
		t.Helper()
		m := regexp.MustCompile(`(?m)` + pattern).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("no match for %s", pattern)
		}
		return strings.TrimSpace(m[1])
	}

	if d, m := value(dockerfile, `^ARG GO_BUILD_FLAGS="([^"]*)"`), value(makefile, `^GO_BUILD_FLAGS\s*:=(.*)$`); d != m {
		t.Errorf("Dockerfile GO_BUILD_FLAGS %q, Makefile %q", d, m)
	}
	// make image adds the commit (-X ...GitCommit) to these.
	if d, m := value(dockerfile, `^ARG GO_LDFLAGS="([^"]*)"`), value(makefile, `^GO_LDFLAGS\s*:=(.*)$`); !strings.HasPrefix(m, d+" ") {
		t.Errorf("Dockerfile GO_LDFLAGS %q is not the start of the Makefile's %q", d, m)
	}
	if !strings.Contains(makefile, "CGO_ENABLED=0 $(GO) build $(GO_BUILD_FLAGS) -ldflags '$(GO_LDFLAGS)'") {
		t.Errorf("make build does not build with CGO_ENABLED=0, GO_BUILD_FLAGS and GO_LDFLAGS")
	}
	if !strings.Contains(dockerfile, "ENV CGO_ENABLED=0") {
		t.Errorf("Dockerfile does not build with CGO_ENABLED=0")
	}
	// The same compiler, or the binaries differ.
	goImage := value(dockerfile, `^ARG GO_IMAGE=golang:(\S+)-bookworm`)
	if "go"+goImage != runtime.Version() {
		t.Errorf("Dockerfile builds with golang:%s, the tests with %s: update GO_IMAGE", goImage, runtime.Version())
	}
	// Without `make image`'s -v, the Go caches are BuildKit's cache mounts.
	for _, c := range []struct{ arg, mount string }{{"GOCACHE", "/root/.cache/go-build"}, {"GOMODCACHE", "/go/pkg/mod"}} {
		if d := value(dockerfile, `^ARG `+c.arg+`=(\S+)`); d != c.mount || !strings.Contains(dockerfile, "--mount=type=cache,target="+c.mount) {
			t.Errorf("Dockerfile %s defaults to %s, not the cache mount %s", c.arg, d, c.mount)
		}
	}
	if base := value(dockerfile, `^ARG BASE_IMAGE=(\S+)`); base != "gcr.io/distroless/static-debian12:nonroot" {
		t.Errorf("base image %s", base)
	}
	for _, want := range []string{
		"FROM ${BASE_IMAGE} AS controller",
		"FROM ${BASE_IMAGE} AS coredns",
		"EXPOSE 53/udp 53/tcp 9153",
		"EXPOSE 8080",
		"USER 65532:65532",
		"setcap cap_net_bind_service=+ep /out/coredns",
	} {
		if !strings.Contains(dockerfile, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
}
