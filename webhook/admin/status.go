package admin

import (
	"encoding/json"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	adminv1 "latchkey.dev/latchkey/api/admin/v1alpha1"
)

// apiError is a metav1.Status failure: every error this API returns has that shape, so
// kubectl prints it as it prints the kube-apiserver's own ("Error from server (NotFound): …").
type apiError struct {
	code    int
	reason  metav1.StatusReason
	message string
	details *metav1.StatusDetails
}

func (e *apiError) Error() string { return e.message }

var errUnauthorized = &apiError{http.StatusUnauthorized, metav1.StatusReasonUnauthorized,
	"Unauthorized: only the kube-apiserver's front proxy may call this server", nil}

func badRequest(msg string) *apiError {
	return &apiError{http.StatusBadRequest, metav1.StatusReasonBadRequest, msg, nil}
}

func notFound(resource, name string) *apiError {
	return &apiError{http.StatusNotFound, metav1.StatusReasonNotFound,
		resource + "." + adminv1.Group + " \"" + name + "\" not found",
		&metav1.StatusDetails{Name: name, Group: adminv1.Group, Kind: resource}}
}

func notAllowed(msg string) *apiError {
	return &apiError{http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, msg, nil}
}

var errInternal = &apiError{http.StatusInternalServerError, metav1.StatusReasonInternalError,
	"Internal error: the state store did not answer; see the latchkey server's log", nil}

func writeStatus(w http.ResponseWriter, _ *http.Request, e *apiError) {
	writeJSON(w, e.code, &metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Message:  e.message,
		Reason:   e.reason,
		Details:  e.details,
		Code:     int32(e.code), //nolint:gosec // an HTTP status code
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// expired is 410 Expired: what the client holds (a resourceVersion, a continue token) names
// a state this server can no longer start from; client-go relists on it.
func expired(msg string) *apiError {
	return &apiError{http.StatusGone, metav1.StatusReasonExpired, msg, nil}
}
