package run

import "testing"

func TestCorefile(t *testing.T) {
	got := Corefile(`
    global cluster.local {
        ttl 1
    }
`) + Server("KUBE_PORT", `
    kubernetes cluster.local
`)
	want := `.:{$DNS_PORT} {
    bind 127.0.0.1
    ready 127.0.0.1:{$READY_PORT}
    prometheus 127.0.0.1:{$METRICS_PORT}
    global cluster.local {
        ttl 1
    }
}
.:{$KUBE_PORT} {
    bind 127.0.0.1
    kubernetes cluster.local
}
`
	if got != want {
		t.Errorf("Corefile =\n%s\nwant\n%s", got, want)
	}
}
