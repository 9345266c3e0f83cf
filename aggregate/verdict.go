package aggregate

import corev1 "k8s.io/api/core/v1"

// Verdict is what globalmirror does with a base's global name: the one rule
// the controller writes by and the plugin answers by.
type Verdict int

const (
	// VerdictNone: no global, and no Service owns the name: nothing to
	// write; the plugin answers NXDOMAIN (the name does not exist, whatever
	// a lagging cache of the next plugin still has).
	VerdictNone Verdict = iota
	// VerdictBuild: the global exists and the name is free or
	// globalmirror's: write the Service and slices; answer from the view.
	VerdictBuild
	// VerdictRemove: no global, but globalmirror's Service still owns the
	// name: delete it and its slices; answer NXDOMAIN for every name under
	// it meanwhile, never from those stale objects.
	VerdictRemove
	// VerdictYield: someone else's Service owns the name and no global is
	// wanted: touch nothing; the name is the next plugin's.
	VerdictYield
	// VerdictConflict: someone else's Service owns the name of a global
	// that should exist: as VerdictYield, and say so.
	VerdictConflict
)

// GlobalVerdict decides, from a base's input and the Service that owns its
// global's name (nil when none does).
func GlobalVerdict(in Input, owner *corev1.Service) Verdict {
	exists := Exists(in)
	switch OwnerOf(owner) {
	case OwnerUser:
		if exists {
			return VerdictConflict
		}
		return VerdictYield
	case OwnerGlobalmirror:
		if !exists {
			return VerdictRemove
		}
	default:
		if !exists {
			return VerdictNone
		}
	}
	return VerdictBuild
}

// Member reports whether the classified Service is a member of its base's
// global: a headless mirror or the local service.
func (c Classification) Member() bool {
	return c.Role == RoleHeadlessMirror || c.Role == RoleLocal
}

// ManagedBase is the base an object globalmirror wrote belongs to, from its
// labels and the name of the Service it is or belongs to: the base label, or
// the name minus the suffix when someone removed the label.
func ManagedBase(lbl map[string]string, serviceName, suffix string) (string, bool) {
	if b := lbl[LabelBase]; b != "" {
		return b, true
	}
	return BaseOf(serviceName, suffix)
}
