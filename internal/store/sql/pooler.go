package sqlstore

import (
	"context"
	"fmt"
	"strings"
)

// Latchkey runs on PostgreSQL directly and through a pooler in transaction mode (PgBouncer,
// CloudNativePG's Pooler), where consecutive transactions of one connection may run on
// different server connections. The store keeps no session state: every lock is transaction
// scoped (pg_advisory_xact_lock, FOR UPDATE), nothing is SET outside a transaction, nothing
// LISTENs. What remains is the operator's part, in docs/operations.md ("PostgreSQL in
// production") and docs/decisions/0026-postgresql-behind-a-transaction-pooler.md: pgx's named
// prepared statements need default_query_exec_mode=cache_describe in the DSN before PgBouncer
// 1.21, and the schema is chosen by the role (ALTER ROLE … SET search_path), because a pooler
// refuses or drops a search_path sent when connecting.

// checkSearchPath refuses to go on when the DSN chose a schema that the server's connections
// do not have: a pooler configured to ignore the search_path or options startup parameter
// (PgBouncer's ignore_startup_parameters, offered by managed poolers) drops the setting
// silently, and the migrations would then create Latchkey's tables in whatever schema the
// role defaults to, perhaps another installation's.
func (s *Store) checkSearchPath(ctx context.Context) error {
	if s.searchPath == "" {
		return nil
	}
	var have string
	if err := s.w.QueryRowContext(ctx, `SELECT current_setting('search_path')`).Scan(&have); err != nil {
		return fmt.Errorf("sqlstore: read search_path: %w", err)
	}
	// PostgreSQL keeps a search_path given when connecting as it was written, so a setting
	// that arrived reads back unchanged.
	if have != s.searchPath {
		return fmt.Errorf("sqlstore: the DSN sets search_path to %q but the server's connections use %q: "+
			"something between Latchkey and PostgreSQL (a pooler's ignore_startup_parameters) drops it; "+
			"choose the schema with ALTER ROLE … SET search_path instead (docs/operations.md, \"PostgreSQL in production\")",
			s.searchPath, have)
	}
	return nil
}

// connectHint explains the error PgBouncer gives a client that sends a startup parameter it
// does not pass on, as it does for search_path and options before version 1.20.
func connectHint(err error) error {
	if err != nil && strings.Contains(err.Error(), "unsupported startup parameter") {
		return fmt.Errorf("%w (a pooler refuses search_path and options in the DSN; choose the schema with "+
			"ALTER ROLE … SET search_path instead, docs/operations.md \"PostgreSQL in production\")", err)
	}
	return err
}

// searchPathParam returns the search_path that the DSN's startup parameters set: a
// search_path parameter, or -c search_path=… (also -csearch_path=…, --search_path=…) in
// options, which PostgreSQL reads as command-line switches separated by spaces, a backslash
// keeping the next character. "" when they set none.
func searchPathParam(params map[string]string) string {
	if v, ok := params["search_path"]; ok {
		return v
	}
	var args []string
	var b strings.Builder
	in, esc := false, false
	for _, r := range params["options"] {
		switch {
		case esc:
			b.WriteRune(r)
			esc, in = false, true
		case r == '\\':
			esc, in = true, true
		case r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '\f' || r == '\v':
			if in {
				args = append(args, b.String())
				b.Reset()
				in = false
			}
		default:
			b.WriteRune(r)
			in = true
		}
	}
	if in {
		args = append(args, b.String())
	}
	path := ""
	for i := 0; i < len(args); i++ {
		var setting string
		switch a := args[i]; {
		case a == "-c" && i+1 < len(args):
			i++
			setting = args[i]
		case strings.HasPrefix(a, "-c"):
			setting = a[2:]
		case strings.HasPrefix(a, "--"):
			setting = a[2:]
		default:
			continue
		}
		name, value, ok := strings.Cut(setting, "=")
		if ok && strings.ReplaceAll(strings.ToLower(name), "-", "_") == "search_path" {
			path = value
		}
	}
	return path
}

// preparedHint explains the errors that pgx's named prepared statements meet through a pooler
// in transaction mode: a statement prepared on one server connection is unknown on the next,
// or another client already prepared it there. The store never prepares statements by name
// itself, so on PostgreSQL these codes mean just that.
func preparedHint(err error) error {
	switch pgCode(err) {
	case "42P05", "26000": // duplicate_prepared_statement, invalid_sql_statement_name
		return fmt.Errorf("%w (through a pooler in transaction mode, add default_query_exec_mode=cache_describe "+
			"to the DSN: docs/operations.md, \"PostgreSQL in production\")", err)
	}
	return err
}
