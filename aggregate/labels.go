package aggregate

import "k8s.io/apimachinery/pkg/util/validation"

// IsDNS1123Label is validation.IsDNS1123Label: nil for a valid label, else
// why not. Valid names, every one on the paths a start or a change takes
// per object (hostnames, cluster and base names), are told by a byte loop
// that allocates nothing and compiles no regular expression; it agrees with
// the validation package (TestLabelChecksAgreeWithValidation). The package
// still words the message of an invalid one.
func IsDNS1123Label(s string) []string {
	if isLabel(s, false) {
		return nil
	}
	return validation.IsDNS1123Label(s)
}

// IsDNS1035Label is validation.IsDNS1035Label, as IsDNS1123Label is.
func IsDNS1035Label(s string) []string {
	if isLabel(s, true) {
		return nil
	}
	return validation.IsDNS1035Label(s)
}

// isLabel: 1 to 63 of [a-z0-9-], neither first nor last a '-', and the
// first a letter if letterFirst (RFC 1035) or a letter or digit (RFC 1123).
func isLabel(s string, letterFirst bool) bool {
	if len(s) == 0 || len(s) > validation.DNS1123LabelMaxLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z':
		case '0' <= c && c <= '9':
			if i == 0 && letterFirst {
				return false
			}
		case c == '-':
			if i == 0 || i == len(s)-1 {
				return false
			}
		default:
			return false
		}
	}
	return true
}
