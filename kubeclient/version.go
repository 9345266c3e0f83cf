package kubeclient

import "strconv"

// Version is an object's resourceVersion where it is a number, as etcd's
// are, else 0: unknown. A number where the string costs a header and its
// bytes, for sinks that keep one per object (8 bytes: TestVersionSize).
type Version uint64

// ParseVersion is the Version of resourceVersion rv.
func ParseVersion(rv string) Version {
	v, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return 0
	}
	return Version(v)
}

// Is reports whether an object at resourceVersion rv is the object as it
// was at v: the one meaning of "the same version" for every sink (CurrentSink)
// and cache the feeds fill. Versions are compared for equality only, as the
// API allows (never for order: objects restored from an etcd snapshot keep
// their old versions); an unknown version is never the same, so what
// cannot be told apart is read again.
func (v Version) Is(rv string) bool {
	return v != 0 && v == ParseVersion(rv)
}

// SameVersion reports whether resourceVersions have and rv are of the same
// object as it was: ParseVersion(have).Is(rv).
func SameVersion(have, rv string) bool {
	return ParseVersion(have).Is(rv)
}
