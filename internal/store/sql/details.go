package sqlstore

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
)

// Audit details are a flat map of strings in a TEXT column, written for every audited request
// (one per token request) and read back by the event relay for every record. Like list
// columns (see list), plain keys and values skip encoding/json both ways: the text is the one
// encoding/json writes (keys sorted, nothing escaped), and whatever is not plain, or not in
// that compact shape, goes through encoding/json (TestDetailsColumns).

// detailsText is the details column of m: "{}" when empty.
func detailsText(m map[string]string) (string, error) {
	if len(m) == 0 {
		return "{}", nil
	}
	n := 1
	for k, v := range m {
		if !plain(k) || !plain(v) {
			b, err := json.Marshal(m)
			return string(b), err
		}
		n += len(k) + len(v) + 6
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteByte('{')
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		b.WriteString(k)
		b.WriteString(`":"`)
		b.WriteString(m[k])
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String(), nil
}

// fromDetails reads a details column; "{}" is nil, as encoding/json leaves it.
func fromDetails(s string) (map[string]string, error) {
	if s == "{}" {
		return nil, nil
	}
	if m, ok := plainDetails(s); ok {
		return m, nil
	}
	var m map[string]string
	err := json.Unmarshal([]byte(s), &m)
	return m, err
}

// plainDetails reads {"k":"v",…} written without spaces, whose text is printable ASCII
// without a backslash: then no key or value holds a quote (encoding/json would have escaped
// it), so every quote is a delimiter and the pairs split exactly. Anything else is not ok.
func plainDetails(s string) (map[string]string, bool) {
	inner, ok := strings.CutPrefix(s, `{"`)
	if !ok || !strings.HasSuffix(inner, `"}`) {
		return nil, false
	}
	inner = inner[:len(inner)-2]
	for i := 0; i < len(inner); i++ {
		if c := inner[i]; c < 0x20 || c >= 0x7f || c == '\\' {
			return nil, false
		}
	}
	m := make(map[string]string, strings.Count(inner, `","`)+1)
	for pair := range strings.SplitSeq(inner, `","`) {
		k, v, ok := strings.Cut(pair, `":"`)
		if !ok || strings.Contains(k, `"`) || strings.Contains(v, `"`) {
			return nil, false
		}
		m[k] = v
	}
	return m, true
}
