//go:build !unix

package cli

import (
	"context"

	"k8s.io/client-go/rest"
)

// Credentials leaves cfg's exec credential plugin to client-go where
// process groups are not Unix's.
func Credentials(_ context.Context, cfg *rest.Config) (*rest.Config, error) { return cfg, nil }
