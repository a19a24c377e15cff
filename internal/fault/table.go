package fault

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

// Missing lists the kinds t has no answer for; each wire's test fails
// on any.
func (t Table[A]) Missing() []Kind {
	var missing []Kind
	for _, k := range Kinds() {
		if _, ok := t.Kinds[k]; !ok {
			missing = append(missing, k)
		}
	}
	return missing
}
