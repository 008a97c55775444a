// Package conformance is the behaviour every store.Store must show, run against each backend
// (internal/store/sql runs it on SQLite always and on PostgreSQL when
// LATCHKEY_TEST_POSTGRES_DSN is set). Each test gets a fresh, empty store. Times are explicit
// (a fixed base plus offsets); nothing sleeps.
package conformance

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

// Run runs every behaviour as a subtest; newStore returns a fresh empty store and arranges
// for it to be closed when the subtest ends.
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, newStore(t))
		})
	}
}

type test struct {
	name string
	fn   func(t *testing.T, s store.Store)
}

var tests = []test{
	{"Ping", testPing},

	{"Revision/MovesOnWithdrawal", testRevisionMovesOnWithdrawal},
	{"Revision/QuietWrites", testRevisionQuietWrites},

	{"Person/Upsert", testPersonUpsert},
	{"Person/IDTaken", testPersonIDTaken},
	{"Person/Find", testPersonFind},
	{"Session/Lifecycle", testSessionLifecycle},

	{"Client/RoundTrip", testClientRoundTrip},
	{"Client/Update", testClientUpdate},
	{"Client/UpdateConcurrent", testClientUpdateConcurrent},
	{"Client/List", testClientList},
	{"Client/DeleteRevokes", testClientDeleteRevokes},

	{"Grant/Union", testGrantUnion},
	{"Grant/UpsertConcurrent", testGrantUpsertConcurrent},
	{"Grant/DeleteRevokes", testGrantDeleteRevokes},

	{"AuthCode/RedeemOnce", testCodeRedeemOnce},
	{"AuthCode/RedeemConcurrent", testCodeRedeemConcurrent},
	{"AuthCode/Expired", testCodeExpired},
	{"AuthCode/RedeemChecked", testCodeRedeemChecked},
	{"AuthCode/RedeemCheckedConcurrent", testCodeRedeemCheckedConcurrent},
	{"AuthCode/DPoPBinding", testCodeDPoPBinding},
	{"AuthCode/AuthorizationDetails", testCodeAuthorizationDetails},
	{"AuthCode/ReplayMark", testCodeReplayMark},

	{"Token/RoundTrip", testTokenRoundTrip},
	{"Token/Holder", testTokenHolder},
	{"Token/BatchAtomic", testTokenBatchAtomic},
	{"Token/Revoke", testTokenRevoke},
	{"Token/RevokeFamily", testTokenRevokeFamily},
	{"Token/RevokeByCode", testTokenRevokeByCode},
	{"Token/RevokeClientTokens", testTokenRevokeClientTokens},
	{"Token/RevokeClientTokensIn", testTokenRevokeClientTokensIn},
	{"Token/CountLive", testTokenCountLive},
	{"Token/AuthorizationDetails", testTokenAuthorizationDetails},

	{"Rotate/Rotated", testRotateRotated},
	{"Rotate/GraceReplay", testRotateGraceReplay},
	{"Rotate/ReuseAfterGrace", testRotateReuseAfterGrace},
	{"Rotate/ReuseTwoGenerationsOld", testRotateReuseTwoGenerationsOld},
	{"Rotate/ReuseWithoutGrace", testRotateReuseWithoutGrace},
	{"Rotate/Inactive", testRotateInactive},
	{"Rotate/NotFound", testRotateNotFound},
	{"Rotate/SuccessorMustStayInFamily", testRotateSuccessorInFamily},
	{"Rotate/ConcurrentGrace", testRotateConcurrentGrace},
	{"Rotate/ConcurrentNoGrace", testRotateConcurrentNoGrace},
	{"Rotate/ReplayForgottenAfterGrace", testRotateReplayForgotten},

	{"Connection/SaveAndGet", testConnectionSaveGet},
	{"Connection/Update", testConnectionUpdate},
	{"Connection/UpdateConcurrent", testConnectionUpdateConcurrent},
	{"Connection/Delete", testConnectionDelete},
	{"Connection/Finish", testConnectionFinish},
	{"Connection/FinishRacesEnd", testConnectionFinishRacesEnd},
	{"Connection/SubjectAccessPerson", testSubjectAccessPerson},
	{"Connection/Due", testConnectionsDue},
	{"Connection/TouchKeepsRefresh", testTouchKeepsRefresh},
	{"Connection/Count", testConnectionCount},
	{"Sealed/ConnectionsSealedWithout", testConnectionsSealedWithout},
	{"Sealed/ValueCounts", testSealedValueCounts},
	{"Permission/Lifecycle", testPermissionLifecycle},
	{"Permission/OtherPersonsConnection", testPermissionOtherPerson},
	{"Permission/AgentAccess", testAgentAccess},
	{"Connection/Default", testConnectionDefault},
	{"Connection/DefaultConcurrent", testConnectionDefaultConcurrent},
	{"Connection/FirstConcurrent", testConnectionFirstConcurrent},
	{"Link/Account", testLinkAccount},

	{"CallbackState/Lifecycle", testCallbackLifecycle},
	{"CallbackState/CheckKeepsRow", testCallbackCheckKeepsRow},
	{"CallbackState/ConsumeConcurrent", testCallbackConsumeConcurrent},
	{"CallbackState/EndForPerson", testCallbackEndForPerson},

	{"Link/OpenSameKind", testLinkOpenSameKind},
	{"Link/ReplaceOnKindChange", testLinkReplace},
	{"Link/ExpiredIsNotOpen", testLinkExpired},
	{"Link/Close", testLinkClose},
	{"Link/Scope", testLinkScope},
	{"Link/OpenConcurrent", testLinkOpenConcurrent},
	{"Link/OpenConcurrentMixedKinds", testLinkOpenConcurrentMixed},

	{"Audit/AppendList", testAudit},
	{"Audit/Relay", testAuditRelay},
	{"Audit/RelayConcurrent", testAuditRelayConcurrent},
	{"Audit/Queued", testAuditQueued},
	{"Audit/Batched", testAuditBatched},

	{"Outbox/Lifecycle", testOutboxLifecycle},
	{"Outbox/Duplicate", testOutboxDuplicate},
	{"Outbox/ClaimConcurrent", testOutboxClaimConcurrent},

	{"Leavers/EndSignIns", testEndSignIns},
	{"Leavers/Logout", testLogout},
	{"Leavers/SavePersonCheck", testSavePersonCheck},
	{"Leavers/UpdatePersonCheck", testUpdatePersonCheck},

	{"Passkey/Add", testPasskeyAdd},
	{"Passkey/Get", testPasskeyGet},
	{"Passkey/List", testPasskeyList},
	{"Passkey/Delete", testPasskeyDelete},
	{"Passkey/Use", testPasskeyUse},
	{"Passkey/UseConcurrent", testPasskeyUseConcurrent},
	{"Passkey/CreateCeremony", testPasskeyCreateCeremony},
	{"Passkey/TakeCeremony", testPasskeyTakeCeremony},
	{"Passkey/TakeCeremonyConcurrent", testPasskeyTakeCeremonyConcurrent},

	{"GarbageCollect", testGarbageCollect},

	{"Token/Binding", testTokenBinding},
	{"Token/Delegation", testTokenDelegation},
	{"Connection/Actors", testConnectionActors},
	{"UseOnce/Replay", testUseOnce},
	{"UseOnce/Concurrent", testUseOnceConcurrent},
	{"UseOnce/Collected", testUseOnceCollected},
	{"PushedRequest/Once", testPushedOnce},
	{"PushedRequest/ConsumeConcurrent", testPushedConcurrent},

	{"Approval/Lifecycle", testApprovalLifecycle},
	{"Approval/Poll", testApprovalPoll},
	{"Approval/RedeemConcurrent", testApprovalRedeemConcurrent},
	{"Approval/Collected", testApprovalCollected},
	{"Approval/Blocks", testApprovalBlocks},
}

// ---------------------------------------------------------------------------------------------
// Helpers

// base has a sub-second part so that a store that drops precision fails round trips.
var base = time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC)

func at(d time.Duration) time.Time { return base.Add(d) }

func tp(t time.Time) *time.Time { return &t }

// hash stands in for internal/secret.Hash of a random secret.
func hash(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
}

func wantErr(t testing.TB, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error = %v, want %v", err, target)
	}
}

func equal[T any](t testing.TB, what string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got  %+v\nwant %+v", what, got, want)
	}
}

// parallel runs fn(i) for i in [0,n) on n goroutines released together, and waits.
func parallel(n int, fn func(i int)) {
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	ready.Add(n)
	done.Add(n)
	for i := range n {
		go func() {
			defer done.Done()
			ready.Done()
			<-start
			fn(i)
		}()
	}
	ready.Wait()
	close(start)
	done.Wait()
}

func testPing(t *testing.T, s store.Store) {
	must(t, s.Ping(t.Context()))
}

const project = "team-a/main"

func id(prefix string, i int) string { return fmt.Sprintf("%s-%d", prefix, i) }
