package fault

import "fmt"

// Table is one wire's answers: one for each kind, and one for each public
// code whose answer on this wire is not its kind's (each code answers one
// way on a wire). A is the wire's answer: a status, a code, or both.
type Table[A any] struct {
	Kinds map[Kind]A
	Codes map[string]A
}

// Answer is t's answer to f: its code's, else its kind's.
func (t Table[A]) Answer(f *Error) A {
	if a, ok := t.Codes[f.Code]; ok && f.Code != "" {
		return a
	}
	return t.Kinds[f.Kind]
}

// With returns a copy of t that answers kind k with a.
func (t Table[A]) With(k Kind, a A) Table[A] {
	kinds := make(map[Kind]A, len(t.Kinds))
	for kk, v := range t.Kinds {
		kinds[kk] = v
	}
	kinds[k] = a
	return Table[A]{Kinds: kinds, Codes: t.Codes}
}

// Check reports the kinds t has no answer for: each wire's test fails on
// any.
func (t Table[A]) Check() error {
	if missing := t.missing(); len(missing) > 0 {
		return fmt.Errorf("no answer for the kinds %v", missing)
	}
	return nil
}

func (t Table[A]) missing() []Kind {
	var missing []Kind
	for _, k := range Kinds() {
		if _, ok := t.Kinds[k]; !ok {
			missing = append(missing, k)
		}
	}
	return missing
}
