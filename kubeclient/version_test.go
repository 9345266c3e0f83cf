package kubeclient

import (
	"testing"
	"unsafe"
)

// A Version is the 8 bytes its comment says.
func TestVersionSize(t *testing.T) {
	if n := unsafe.Sizeof(Version(0)); n != 8 {
		t.Errorf("a Version is %d bytes, want 8", n)
	}
}

func TestSameVersionIsEqualAndKnown(t *testing.T) {
	// {have, rv}: whether they are the same version.
	for c, same := range map[[2]string]bool{
		{"42", "42"}: true,
		{"42", "43"}: false,
		{"43", "42"}: false, // equality only: neither is older
		{"18446744073709551615", "18446744073709551615"}: true,
		{"", ""}:       false, // unknown: read again
		{"abc", "abc"}: false, // not etcd's: unknown
		{"0", "0"}:     false,
		{"42", ""}:     false,
		{"", "42"}:     false,
	} {
		if got := SameVersion(c[0], c[1]); got != same {
			t.Errorf("SameVersion(%q, %q) = %v, want %v", c[0], c[1], got, same)
		}
		if got := ParseVersion(c[0]).Is(c[1]); got != same {
			t.Errorf("ParseVersion(%q).Is(%q) = %v, want %v", c[0], c[1], got, same)
		}
	}
}
