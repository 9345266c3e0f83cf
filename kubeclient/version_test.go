package kubeclient

import "testing"

func TestSameVersionIsEqualAndKnown(t *testing.T) {
	for _, c := range []struct {
		held, rv string
		same     bool
	}{
		{"42", "42", true},
		{"42", "43", false},
		{"43", "42", false}, // equality only: neither is older
		{"18446744073709551615", "18446744073709551615", true},
		{"", "", false},       // unknown: read again
		{"abc", "abc", false}, // not etcd's: unknown
		{"0", "0", false},
		{"42", "", false},
		{"", "42", false},
	} {
		if got := SameVersion(c.held, c.rv); got != c.same {
			t.Errorf("SameVersion(%q, %q) = %v, want %v", c.held, c.rv, got, c.same)
		}
		if got := ParseVersion(c.held).Is(c.rv); got != c.same {
			t.Errorf("ParseVersion(%q).Is(%q) = %v, want %v", c.held, c.rv, got, c.same)
		}
	}
}
