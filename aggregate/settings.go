package aggregate

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The settings the controller's flags and the plugin's stanza share, checked
// by one set of rules: if the two halves disagree on them, they describe
// different globals.

// ValidateSuffix checks that suffix turns a base name into another valid
// Service name.
func ValidateSuffix(suffix string) error {
	if suffix == "" {
		return errors.New("must not be empty: the global service would take the base service's own name")
	}
	if errs := validation.IsDNS1035Label("a" + suffix); len(errs) > 0 {
		return fmt.Errorf("cannot end a service name: %s", errs[0])
	}
	return nil
}

// ParseLocalSelector parses the label selector of local member services. It
// must select something: an empty one would make every headless Service
// named like a base a member.
func ParseLocalSelector(s string) (labels.Selector, error) {
	sel, err := labels.Parse(s)
	if err != nil {
		return nil, err
	}
	if sel.Empty() {
		return nil, errors.New("selects every headless service")
	}
	return sel, nil
}

// ValidateNamespace checks a namespace name.
func ValidateNamespace(ns string) error {
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return fmt.Errorf("not a namespace name: %s", errs[0])
	}
	return nil
}
