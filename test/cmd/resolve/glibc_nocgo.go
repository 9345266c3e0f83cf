//go:build !cgo

package main

import "errors"

func glibc(string, string) ([]string, bool, error) {
	return nil, false, errors.New("built without cgo: no glibc resolver")
}
