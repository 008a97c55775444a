package webhook_test

// exchangeType is left for the tests of this package still to move beside their flow; it goes
// with harness_test.go.
const exchangeType = "urn:ietf:params:oauth:grant-type:token-exchange"
