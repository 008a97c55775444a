package authzdetails

import "slices"

// Covers reports whether every requested detail fits inside one approved detail: the same
// type, the same identifier, and locations, actions and datatypes each a subset of the
// approved detail's, where an empty set is covered only by an empty set (an omitted field may
// mean "everything" to the API). No requested details are covered by anything; the caller
// decides what an empty request means (at refresh and exchange: the approved details apply).
//
// Both lists must be in canonical form (Parse, Validate).
func Covers(approved, requested []Detail) bool {
	for _, r := range requested {
		if !slices.ContainsFunc(approved, func(a Detail) bool { return covers(a, r) }) {
			return false
		}
	}
	return true
}

func covers(a, r Detail) bool {
	return a.Type == r.Type && a.Identifier == r.Identifier &&
		subset(a.Locations, r.Locations) && subset(a.Actions, r.Actions) && subset(a.Datatypes, r.Datatypes)
}

// subset: every element of r is in a, and r is empty only when a is.
func subset(a, r []string) bool {
	if len(r) == 0 {
		return len(a) == 0
	}
	for _, v := range r {
		if !slices.Contains(a, v) {
			return false
		}
	}
	return true
}
