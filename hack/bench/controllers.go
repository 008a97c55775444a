package main

import (
	"context"
	"errors"
)

func runControllers(ctx context.Context, o options) error {
	return errors.New("-controllers: not written yet")
}
