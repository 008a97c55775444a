package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	adminv1 "latchkey.dev/latchkey/api/admin/v1alpha1"
)

type client struct {
	o         *options
	http      *http.Client
	host      string
	namespace string
}

func newClient(o *options) (*client, error) {
	cfg, err := o.config.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	ns, _, err := o.config.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, err
	}
	// The REST config carries every kubeconfig flag: --as and --as-group become impersonation
	// headers the kube-apiserver authorizes (RBAC's impersonate verb) before anything else.
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	return &client{o: o, http: hc, host: strings.TrimSuffix(cfg.Host, "/") + strings.TrimSuffix(cfg.APIPath, "/"), namespace: ns}, nil
}

const tableAccept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"

// path is the URL path of a resource (and object) in the namespace, or across namespaces.
func (c *client) path(resource, name string, all bool) string {
	p := "/apis/" + adminv1.GroupVersion
	if !all {
		p += "/namespaces/" + url.PathEscape(c.namespace)
	}
	p += "/" + resource
	if name != "" {
		p += "/" + url.PathEscape(name)
	}
	return p
}

// do sends a request to the kube-apiserver and decodes a 2xx answer into out; any other
// answer becomes an error carrying the server's Status message, as kubectl prints it.
func (c *client) do(ctx context.Context, method, path string, q url.Values, accept string, out any) error {
	return c.send(ctx, method, path, q, accept, nil, out)
}

// send is do with a JSON request body (none when body is nil).
func (c *client) send(ctx context.Context, method, path string, q url.Values, accept string, body []byte, out any) error {
	u := c.host + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	// The host is the kubeconfig's cluster: the user's own choice of server.
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", accept)
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		var st metav1.Status
		if json.Unmarshal(b, &st) == nil && st.Message != "" {
			return &statusError{st}
		}
		if resp.StatusCode == http.StatusNotFound {
			return errors.New("the server does not serve admin.latchkey.dev: is Latchkey installed with its admin API (docs/admin.md)?")
		}
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(b, out)
}

// statusError is a Status the server answered with, printed as kubectl prints one.
type statusError struct{ st metav1.Status }

func (e *statusError) Error() string { return fmt.Sprintf("%s (%s)", e.st.Message, e.st.Reason) }

func isNotFound(err error) bool {
	var se *statusError
	return errors.As(err, &se) && se.st.Reason == metav1.StatusReasonNotFound
}

// selectors builds the label selector for -l, --project and a person id.
func (c *client) selectors(personID string) url.Values {
	q := url.Values{}
	var sel []string
	if c.o.selector != "" {
		sel = append(sel, c.o.selector)
	}
	if c.o.project != "" {
		sel = append(sel, adminv1.ProjectLabel+"="+c.o.project)
	}
	if personID != "" {
		sel = append(sel, adminv1.PersonLabel+"="+personID)
	}
	if len(sel) > 0 {
		q.Set("labelSelector", strings.Join(sel, ","))
	}
	return q
}

// people finds the people a --person value names: an email (in any Project of the scope) or an id.
func (c *client) people(ctx context.Context, who string) ([]adminv1.Person, error) {
	q := c.selectors("")
	if strings.Contains(who, "@") {
		q.Set("fieldSelector", "email="+who)
	} else {
		q.Set("fieldSelector", "metadata.name="+who)
	}
	var l adminv1.PersonList
	if err := c.do(ctx, "GET", c.path(adminv1.ResourcePeople, "", c.o.allNamespaces), q, "application/json", &l); err != nil {
		return nil, err
	}
	if len(l.Items) == 0 {
		return nil, fmt.Errorf("no person %q in %s", who, c.where())
	}
	return l.Items, nil
}

func (c *client) where() string {
	if c.o.allNamespaces {
		return "any namespace"
	}
	s := "namespace " + c.namespace
	if c.o.project != "" {
		s += ", project " + c.o.project
	}
	return s
}

// view lists a resource, page by page, and prints it.
func (c *client) view(ctx context.Context, out io.Writer, resource string, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("%s takes no arguments; narrow with --person, --project or -n", resource)
	}
	var persons []string
	if c.o.person != "" {
		if resource == adminv1.ResourcePeople {
			return errors.New("people: use --email")
		}
		ps, err := c.people(ctx, c.o.person)
		if err != nil {
			return err
		}
		for _, p := range ps {
			persons = append(persons, p.Name)
		}
	} else {
		persons = []string{""}
	}
	table := !c.o.printed()
	var rows []metav1.TableRow
	var cols []metav1.TableColumnDefinition
	var items []json.RawMessage
	for _, person := range persons {
		q := c.selectors(person)
		if c.o.email != "" {
			q.Set("fieldSelector", "email="+c.o.email)
		}
		q.Set("limit", "500")
		for {
			if table {
				var t metav1.Table
				if err := c.do(ctx, "GET", c.path(resource, "", c.o.allNamespaces), q, tableAccept, &t); err != nil {
					return err
				}
				cols, rows = t.ColumnDefinitions, append(rows, t.Rows...)
				if t.Continue == "" {
					break
				}
				q.Set("continue", t.Continue)
				continue
			}
			var l struct {
				metav1.ListMeta `json:"metadata"`
				Items           []json.RawMessage `json:"items"`
			}
			if err := c.do(ctx, "GET", c.path(resource, "", c.o.allNamespaces), q, "application/json", &l); err != nil {
				return err
			}
			items = append(items, l.Items...)
			if l.Continue == "" {
				break
			}
			q.Set("continue", l.Continue)
		}
	}
	if !table {
		return c.printList(out, items)
	}
	return c.printTable(out, resource, cols, rows)
}

func (c *client) printTable(out io.Writer, resource string, cols []metav1.TableColumnDefinition, rows []metav1.TableRow) error {
	if len(rows) == 0 {
		_, err := fmt.Fprintf(out, "No %s found in %s.\n", resource, c.where())
		return err
	}
	if c.o.output == "name" {
		for _, r := range rows {
			fmt.Fprintf(out, "%s.%s/%v\n", resource, adminv1.Group, r.Cells[0])
		}
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 8, 3, ' ', 0)
	var head []string
	if c.o.allNamespaces {
		head = append(head, "NAMESPACE")
	}
	var show []int
	for i, col := range cols {
		if col.Priority == 0 || c.o.output == "wide" {
			show = append(show, i)
			head = append(head, strings.ToUpper(col.Name))
		}
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, r := range rows {
		var cells []string
		if c.o.allNamespaces {
			var m metav1.PartialObjectMetadata
			_ = json.Unmarshal(r.Object.Raw, &m)
			cells = append(cells, m.Namespace)
		}
		for _, i := range show {
			v := ""
			if i < len(r.Cells) {
				v = fmt.Sprint(r.Cells[i])
			}
			if v == "" {
				v = "<none>"
			}
			cells = append(cells, v)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

// printList prints items as one List, as kubectl get does: -o json|yaml print the List,
// -o jsonpath|go-template apply to it ({.items[*].metadata.name}).
func (c *client) printList(out io.Writer, items []json.RawMessage) error {
	list := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "v1", "kind": "List", "metadata": map[string]any{}}}
	for _, raw := range items {
		obj := map[string]any{}
		if err := utiljson.Unmarshal(raw, &obj); err != nil {
			return err
		}
		list.Items = append(list.Items, unstructured.Unstructured{Object: obj})
	}
	p, err := c.o.print.ToPrinter()
	if err != nil {
		return err
	}
	return p.PrintObj(list, out)
}

// revoke ends access: revoke person|grant|connection|client-tokens.
func (c *client) revoke(ctx context.Context, out io.Writer, args []string) error {
	if len(args) < 2 {
		return errors.New("revoke what? person P | grant P CLIENT | connection ID | passkey ID | passkeys P | client-tokens CLIENT")
	}
	if c.o.allNamespaces {
		return errors.New("revoke acts in one namespace: use -n, not -A")
	}
	var resource, name, what string
	switch args[0] {
	case "person", "people":
		ps, err := c.people(ctx, args[1])
		if err != nil {
			return err
		}
		if len(ps) > 1 {
			var names []string
			for _, p := range ps {
				names = append(names, p.Project+"/"+p.Name)
			}
			return fmt.Errorf("%q is a person of %d projects (%s): choose one with --project", args[1], len(ps), strings.Join(names, ", "))
		}
		resource, name, what = adminv1.ResourcePeople, ps[0].Name, "access of "+args[1]+" ended"
	case "grant", "grants":
		switch {
		case len(args) == 2 && strings.Contains(args[1], "."):
			resource, name = adminv1.ResourceGrants, args[1]
		case len(args) == 3:
			ps, err := c.people(ctx, args[1])
			if err != nil {
				return err
			}
			if len(ps) > 1 {
				return fmt.Errorf("%q is a person of %d projects: choose one with --project", args[1], len(ps))
			}
			client, err := c.clientID(ctx, ps[0].Name, args[2])
			if err != nil {
				return err
			}
			resource, name = adminv1.ResourceGrants, adminv1.GrantName(ps[0].Name, client)
		default:
			return errors.New("revoke grant P CLIENT, or revoke grant NAME (a name from the grants view)")
		}
		what = "grant " + name + " revoked"
	case "connection", "connections":
		resource, name, what = adminv1.ResourceConnections, args[1], "connection "+args[1]+" disconnected"
	case "passkey":
		resource, name, what = adminv1.ResourcePasskeys, args[1], "passkey "+args[1]+" removed"
	case "passkeys":
		return c.removePasskeys(ctx, out, args[1])
	case "client-tokens", "clienttokens", "tokens":
		resource, name, what = adminv1.ResourceClientTokens, adminv1.ClientName(args[1]), "tokens of client "+args[1]+" revoked"
	default:
		return fmt.Errorf("revoke %q: want person, grant, connection, passkey, passkeys or client-tokens", args[0])
	}
	q := url.Values{}
	if c.o.dryRun {
		q.Set("dryRun", "All")
	}
	var st metav1.Status
	if err := c.do(ctx, "DELETE", c.path(resource, name, false), q, "application/json", &st); err != nil {
		return err
	}
	if c.o.dryRun {
		what += " (server dry run)"
	}
	if st.Message != "" {
		what += ": " + st.Message
	}
	_, err := fmt.Fprintln(out, what)
	return err
}

// removePasskeys removes every passkey of the person who names, one DELETE each (each its own
// audit record), and says how many.
func (c *client) removePasskeys(ctx context.Context, out io.Writer, who string) error {
	ps, err := c.people(ctx, who)
	if err != nil {
		return err
	}
	if len(ps) > 1 {
		return fmt.Errorf("%q is a person of %d projects: choose one with --project", who, len(ps))
	}
	q := c.selectors(ps[0].Name)
	q.Set("labelSelector", adminv1.ProjectLabel+"="+ps[0].Project+","+adminv1.PersonLabel+"="+ps[0].Name)
	var names []string
	for {
		var l adminv1.PasskeyList
		if err := c.do(ctx, "GET", c.path(adminv1.ResourcePasskeys, "", false), q, "application/json", &l); err != nil {
			return err
		}
		for _, k := range l.Items {
			names = append(names, k.Name)
		}
		if l.Continue == "" {
			break
		}
		q.Set("continue", l.Continue)
	}
	del := url.Values{}
	if c.o.dryRun {
		del.Set("dryRun", "All")
	}
	removed := 0
	for _, name := range names {
		err := c.do(ctx, "DELETE", c.path(adminv1.ResourcePasskeys, name, false), del, "application/json", nil)
		// Removed meanwhile (by the person, or another administrator): nothing left to do.
		if err != nil && !isNotFound(err) {
			return fmt.Errorf("removed %d of %d passkeys of %s: %w", removed, len(names), who, err)
		}
		if err == nil {
			removed++
		}
	}
	what := fmt.Sprintf("%d passkeys of %s removed", removed, who)
	if c.o.dryRun {
		what += " (server dry run)"
	}
	_, err = fmt.Fprintln(out, what)
	return err
}

// clientID finds the client a person granted by id or display name.
func (c *client) clientID(ctx context.Context, person, client string) (string, error) {
	q := c.selectors(person)
	var l adminv1.GrantList
	if err := c.do(ctx, "GET", c.path(adminv1.ResourceGrants, "", false), q, "application/json", &l); err != nil {
		return "", err
	}
	for _, g := range l.Items {
		if g.ClientID == client || strings.EqualFold(g.ClientDisplayName, client) {
			return g.ClientID, nil
		}
	}
	return "", fmt.Errorf("the person has no grant for a client %q", client)
}

// audit prints audit records, oldest first; with --follow it keeps polling for new ones.
func (c *client) audit(ctx context.Context, out io.Writer) error {
	q := c.selectors("")
	var fs []string
	for _, f := range []struct{ k, v string }{{"action", c.o.action}, {"actor", c.o.actor}, {"target", c.o.target}} {
		if f.v != "" {
			fs = append(fs, f.k+"="+f.v)
		}
	}
	if len(fs) > 0 {
		q.Set("fieldSelector", strings.Join(fs, ","))
	}
	if c.o.since > 0 {
		q.Set("since", time.Now().Add(-c.o.since).UTC().Format(time.RFC3339))
	}
	q.Set("limit", "500")
	tw := tabwriter.NewWriter(out, 0, 8, 3, ' ', 0)
	table := c.o.output == "table" || c.o.output == "wide"
	if table {
		head := "TIME\tACTOR\tACTION\tTARGET\tOUTCOME\tREASON\tDETAILS"
		if c.o.allNamespaces {
			head = "NAMESPACE\t" + head
		}
		fmt.Fprintln(tw, head)
	}
	var cur cursor
	// from is where the next request starts: the overlap below the highest id at the start of
	// a poll, the last id of the page before within one.
	from := cur.after()
	for {
		var l adminv1.AuditRecordList
		q.Set("after", fmt.Sprint(from))
		err := c.do(ctx, "GET", c.path(adminv1.ResourceAuditRecords, "", c.o.allNamespaces), q, "application/json", &l)
		if errors.Is(err, context.Canceled) {
			return nil // Ctrl-C while following
		}
		if err != nil {
			return err
		}
		for _, r := range l.Items {
			from = max(from, r.ID)
			if !cur.fresh(r.ID) {
				continue // printed by an earlier poll
			}
			if err := c.printAudit(out, tw, r, table); err != nil {
				return err
			}
		}
		if table {
			if err := tw.Flush(); err != nil {
				return err
			}
		}
		if len(l.Items) > 0 && l.Continue != "" {
			continue // more pages now
		}
		if !c.o.follow {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(c.o.interval):
		}
		from = cur.after()
	}
}

// cursor is where --follow asks from. Record ids are handed out before their transaction
// commits, so on PostgreSQL a batch of records can become visible after a record with a higher
// id (the server writes the token endpoint's records in batches of up to 500, docs/audit.md).
// Each poll therefore asks again from overlap ids below the highest seen, and prints only the
// ids it has not printed.
type cursor struct {
	high int64
	seen map[int64]bool
}

// overlap is how far below the highest id seen each poll reads again: two batches.
const overlap = 1000

func (c *cursor) after() int64 { return max(0, c.high-overlap) }

// fresh reports whether id is new, and remembers it.
func (c *cursor) fresh(id int64) bool {
	if c.seen == nil {
		c.seen = map[int64]bool{}
	}
	if c.seen[id] || id <= c.high-overlap {
		return false
	}
	c.seen[id] = true
	if id > c.high {
		c.high = id
		for old := range c.seen {
			if old <= c.high-overlap {
				delete(c.seen, old)
			}
		}
	}
	return true
}

// printAudit prints one record as it arrives: a table row, one JSON object per line, a YAML
// document, its name, or what -o jsonpath|go-template make of it.
func (c *client) printAudit(out io.Writer, tw io.Writer, r adminv1.AuditRecord, table bool) error {
	if c.o.output == "name" {
		_, err := fmt.Fprintf(out, "%s.%s/%s\n", adminv1.ResourceAuditRecords, adminv1.Group, r.Name)
		return err
	}
	if !table {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		if c.o.output != "json" && c.o.output != "yaml" {
			obj := map[string]any{}
			if err := utiljson.Unmarshal(b, &obj); err != nil {
				return err
			}
			u := &unstructured.Unstructured{Object: obj}
			u.SetAPIVersion(adminv1.GroupVersion)
			u.SetKind("AuditRecord")
			p, err := c.o.print.ToPrinter()
			if err != nil {
				return err
			}
			return p.PrintObj(u, out)
		}
		if c.o.output == "yaml" {
			if b, err = yaml.JSONToYAML(b); err != nil {
				return err
			}
			_, err = fmt.Fprintf(out, "---\n%s", b)
			return err
		}
		_, err = fmt.Fprintf(out, "%s\n", b)
		return err
	}
	var details []string
	for k, v := range r.Details {
		details = append(details, k+"="+v)
	}
	slices.Sort(details)
	line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s", r.Time.UTC().Format(time.RFC3339), r.Actor, r.Action, r.Target,
		r.Outcome, r.Reason, strings.Join(details, " "))
	if c.o.allNamespaces {
		line = r.Namespace + "\t" + line
	}
	_, err := fmt.Fprintln(tw, line)
	return err
}
