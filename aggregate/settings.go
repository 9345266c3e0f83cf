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

// NoLocalSelector is the local selector that leaves local services out: only
// mirrors are members. The controller's --local-selector, the Corefile's
// local_selector and the chart's localSelector spell it alike.
const NoLocalSelector = "none"

// ParseLocalSelector parses the label selector of local member services; for
// NoLocalSelector it returns nil, which selects none. It must select
// something: an empty one would make every headless Service named like a base
// a member.
func ParseLocalSelector(s string) (labels.Selector, error) {
	if s == NoLocalSelector {
		return nil, nil
	}
	sel, err := labels.Parse(s)
	if err != nil {
		return nil, err
	}
	if sel.Empty() {
		return nil, fmt.Errorf("selects every headless service (%q leaves local services out)", NoLocalSelector)
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
