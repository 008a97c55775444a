package webhook_test

// policyError is left for the tests of this package still to move beside their flow; it goes
// with harness_test.go.
type policyError string

func (e policyError) Error() string { return string(e) }
