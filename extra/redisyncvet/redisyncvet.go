// Package redisyncvet is a go/analysis pass that catches two traps of
// redisync's two-call form, where ownership lives in the context a lock's
// acquisition returns:
//
//   - a release (Unlock, RUnlock, Release, Resign) given a context that
//     carries no hold of that lock: the parent context (redislock's habit,
//     `defer lock.Release(ctx)`, becomes `defer m.Unlock(ctx)`), another
//     lock's hold, context.Background(). Such a release returns
//     ErrNotHeld, and the lock stays held, and renewed by the watchdog,
//     for as long as the context it was taken with lives: for ever with
//     context.Background();
//   - an acquisition whose hold context is discarded (`m.Lock(ctx)` as a
//     statement, `_, err := m.Lock(ctx)`): nothing can release that hold.
//
// A release is checked in the function that takes the lock (a function
// declaration, with the closures inside it): there its context must be a
// hold's context that an acquisition of the same lock returned (lctx, a
// re-entry's, a context derived from one with the context package's
// With* functions, a variable or field it was copied to, the argument
// of a closure called with it). The same lock is the same variable or
// field, or the same expression (c.Mutex("a")); an RWMutex's read and
// write sides are two. In a function that takes no hold of the lock (a
// helper handed the hold's context by its caller) a release is reported
// only when its context is plainly no hold's: context.Background() or
// context.TODO(). A context the pass cannot follow is not reported: one
// received from a channel, read from a map or a struct field, returned by
// another function, or a parameter of a closure that is not called where
// it is written (a callback handed the hold).
//
// Run it with go vet:
//
//	go install github.com/redisync-go/redisync/extra/redisyncvet/cmd/redisyncvet@latest
//	go vet -vettool=$(which redisyncvet) ./...
//
// or from golangci-lint as a module plugin (package
// github.com/redisync-go/redisync/extra/redisyncvet/golangci; its doc
// says how). It is a module of its own, so that redisync's core does not
// depend on golang.org/x/tools.
package redisyncvet

import (
	"go/ast"
	"go/types"
	"strings"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/passes/inspect"
	"golang.org/x/tools/go/ast/inspector"
)

// CorePath is the import path of the package whose locks the pass checks.
const CorePath = "github.com/redisync-go/redisync"

// Analyzer reports releases given a context that carries no hold of the
// lock, and acquisitions whose hold context is discarded (see the
// package's doc).
var Analyzer = &analysis.Analyzer{
	Name:     "redisyncvet",
	Doc:      "report redisync releases given a context that is not the hold's, and acquisitions whose hold context is discarded",
	URL:      "https://pkg.go.dev/github.com/redisync-go/redisync/extra/redisyncvet",
	Requires: []*analysis.Analyzer{inspect.Analyzer},
	Run:      run,
}

// role is what a method does with a hold.
type role uint8

const (
	acquire role = iota + 1 // returns a hold's context first
	release                 // gives up the hold its first argument carries
)

// method is one method of a redisync lock the pass knows, and the side of
// the lock it works on ("r" for an RWMutex's read side, "" otherwise).
type method struct {
	role role
	side string
}

// exclusive is the method set of a Mutex, a FairMutex and a MultiLock.
var exclusive = map[string]method{
	"Lock": {acquire, ""}, "TryLock": {acquire, ""}, "TryLockFor": {acquire, ""},
	"Unlock": {release, ""},
}

// methods are the methods the pass knows, by the name of their receiver's
// type (a pointer to it) in CorePath, then by name.
var methods = map[string]map[string]method{
	"Mutex":     exclusive,
	"FairMutex": exclusive,
	"MultiLock": exclusive,
	"RWMutex": {
		"Lock": {acquire, ""}, "TryLock": {acquire, ""}, "TryLockFor": {acquire, ""},
		"RLock": {acquire, "r"}, "TryRLock": {acquire, "r"}, "TryRLockFor": {acquire, "r"},
		"Unlock": {release, ""}, "RUnlock": {release, "r"},
	},
	"Semaphore": {
		"Acquire": {acquire, ""}, "TryAcquire": {acquire, ""}, "TryAcquireFor": {acquire, ""},
		"Release": {release, ""},
	},
	"Election": {
		"Campaign": {acquire, ""}, "TryCampaignFor": {acquire, ""},
		"Resign": {release, ""},
	},
}

// lockID names one lock (one side of an RWMutex) in a package: by the
// variable or field its handle is in, or else by the expression that
// makes it.
type lockID struct {
	obj  types.Object
	text string
	side string
}

// lockSet is the set of locks a context carries holds of.
type lockSet map[lockID]bool

// opaque, in a lockSet, says the context may carry holds the pass cannot
// see: it came from where the pass does not follow (a channel, a map, a
// function's result, a closure's parameter, a struct field).
var opaque = lockID{text: "?"}

var opaqueSet = lockSet{opaque: true}

// lockCall is a call of a method the pass knows.
type lockCall struct {
	call   *ast.CallExpr
	typ    string // its receiver's type, in CorePath
	name   string // the method's name
	role   role
	lock   lockID
	recv   string // the receiver, as written
	ctxArg ast.Expr
}

// edge says that dst carries the holds of lock (when set) and of src
// (when set): an acquisition's result, a derived context, a copy; or,
// with opaque, what the pass cannot see.
type edge struct {
	dst    types.Object
	lock   *lockID
	src    ast.Expr
	opaque bool
}

// checker is the state of one pass.
type checker struct {
	pass    *analysis.Pass
	edges   []edge
	carries map[types.Object]lockSet
	params  []types.Object        // closures' parameters
	bound   map[types.Object]bool // those of closures called where they are written
}

// unit is one function the pass checks as a whole: a declaration with the
// closures inside it, or a closure outside any declaration.
type unit struct {
	node     ast.Node
	calls    []lockCall
	acquired map[lockID][]string // each lock taken in it, and the names its holds' contexts went to
}

func run(pass *analysis.Pass) (any, error) {
	ins := pass.ResultOf[inspect.Analyzer].(*inspector.Inspector)
	c := &checker{pass: pass, carries: map[types.Object]lockSet{}, bound: map[types.Object]bool{}}
	var units []*unit
	ins.Preorder([]ast.Node{(*ast.File)(nil)}, func(n ast.Node) {
		for _, d := range n.(*ast.File).Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Body != nil {
					units = append(units, c.collect(d))
				}
			case *ast.GenDecl:
				ast.Inspect(d, func(n ast.Node) bool {
					if fl, ok := n.(*ast.FuncLit); ok {
						units = append(units, c.collect(fl))
						return false
					}
					return true
				})
			}
		}
	})
	for _, p := range c.params {
		if !c.bound[p] {
			c.edges = append(c.edges, edge{dst: p, opaque: true}) // a hold handed in by whoever calls it
		}
	}
	c.solve()
	for _, u := range units {
		c.check(u)
	}
	return nil, nil
}

// collect reads the function n: its calls of lock methods, the edges of
// its assignments, and its acquisitions whose hold context is discarded
// (reported at once).
func (c *checker) collect(n ast.Node) *unit {
	u := &unit{node: n, acquired: map[lockID][]string{}}
	ast.Inspect(n, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			if lc, ok := c.lockCall(n); ok {
				u.calls = append(u.calls, lc)
				if lc.role == acquire {
					if _, seen := u.acquired[lc.lock]; !seen {
						u.acquired[lc.lock] = nil
					}
				}
			}
			if fl, ok := ast.Unparen(n.Fun).(*ast.FuncLit); ok {
				c.closureArgs(fl, n.Args)
			}
		case *ast.FuncLit:
			for _, f := range n.Type.Params.List {
				for _, id := range f.Names {
					if obj := c.pass.TypesInfo.Defs[id]; obj != nil {
						c.params = append(c.params, obj)
					}
				}
			}
		case *ast.RangeStmt:
			for _, x := range []ast.Expr{n.Key, n.Value} {
				if dst := c.objOf(x); dst != nil {
					c.edges = append(c.edges, edge{dst: dst, opaque: true})
				}
			}
		case *ast.ExprStmt:
			c.discarded(n.X)
		case *ast.GoStmt:
			c.discarded(n.Call)
		case *ast.DeferStmt:
			c.discarded(n.Call)
		case *ast.AssignStmt:
			c.assign(u, n.Lhs, n.Rhs)
		case *ast.ValueSpec:
			lhs := make([]ast.Expr, len(n.Names))
			for i, id := range n.Names {
				lhs[i] = id
			}
			c.assign(u, lhs, n.Values)
		case *ast.CompositeLit:
			for _, e := range n.Elts {
				if kv, ok := e.(*ast.KeyValueExpr); ok {
					if key, ok := kv.Key.(*ast.Ident); ok {
						if f, ok := c.pass.TypesInfo.Uses[key].(*types.Var); ok && f.IsField() {
							c.edges = append(c.edges, edge{dst: f, src: kv.Value})
						}
					}
				}
			}
		}
		return true
	})
	return u
}

// assign records the edges of lhs = rhs, and reports an acquisition whose
// hold context goes to _.
func (c *checker) assign(u *unit, lhs, rhs []ast.Expr) {
	switch {
	case len(rhs) == 1 && len(lhs) > 1:
		call, ok := ast.Unparen(rhs[0]).(*ast.CallExpr)
		if !ok {
			// v, ok := <-ch, m[k], x.(T)
			for _, x := range lhs {
				if dst := c.objOf(x); dst != nil {
					c.edges = append(c.edges, edge{dst: dst, opaque: true})
				}
			}
			return
		}
		if lc, ok := c.lockCall(call); ok && lc.role == acquire {
			dst := c.objOf(lhs[0])
			if dst == nil {
				if isBlank(lhs[0]) {
					c.reportDiscarded(lc)
				}
				return
			}
			lock := lc.lock
			c.edges = append(c.edges, edge{dst: dst, lock: &lock, src: lc.ctxArg})
			u.acquired[lc.lock] = append(u.acquired[lc.lock], types.ExprString(lhs[0]))
			return
		}
		if isContextFunc(c.pass, call) && len(call.Args) > 0 {
			if dst := c.objOf(lhs[0]); dst != nil {
				c.edges = append(c.edges, edge{dst: dst, src: call.Args[0]})
			}
			return
		}
		for _, x := range lhs { // another function's results
			if dst := c.objOf(x); dst != nil {
				c.edges = append(c.edges, edge{dst: dst, opaque: true})
			}
		}
	case len(lhs) == len(rhs):
		for i := range lhs {
			if dst := c.objOf(lhs[i]); dst != nil {
				c.edges = append(c.edges, edge{dst: dst, src: rhs[i]})
			}
		}
	}
}

// closureArgs records that the parameters of fl, called at once with
// args, carry what args carry.
func (c *checker) closureArgs(fl *ast.FuncLit, args []ast.Expr) {
	i := 0
	for _, f := range fl.Type.Params.List {
		names := f.Names
		if len(names) == 0 {
			i++
			continue
		}
		for _, id := range names {
			if i < len(args) {
				if obj := c.pass.TypesInfo.Defs[id]; obj != nil {
					c.edges = append(c.edges, edge{dst: obj, src: args[i]})
					c.bound[obj] = true
				}
			}
			i++
		}
	}
}

// discarded reports x when it is an acquisition, whose result a statement
// drops.
func (c *checker) discarded(x ast.Expr) {
	call, ok := ast.Unparen(x).(*ast.CallExpr)
	if !ok {
		return
	}
	if lc, ok := c.lockCall(call); ok && lc.role == acquire {
		c.reportDiscarded(lc)
	}
}

func (c *checker) reportDiscarded(lc lockCall) {
	c.pass.ReportRangef(lc.call,
		"redisync: the hold's context that %s.%s returns is discarded: only it (or a context derived from it) can release the hold; %s with another context returns ErrNotHeld and the lock stays held, renewed, while %s lives",
		lc.recv, lc.name, releaseOf(lc), types.ExprString(lc.ctxArg))
}

// releaseOf names the release of lc's hold.
func releaseOf(lc lockCall) string {
	for name, m := range methods[lc.typ] {
		if m.role == release && m.side == lc.lock.side {
			return name
		}
	}
	return "its release"
}

// solve computes what each variable carries, from the edges, until
// nothing changes.
func (c *checker) solve() {
	for changed := true; changed; {
		changed = false
		for _, e := range c.edges {
			set := c.carriesOf(e.src)
			if e.opaque {
				set = opaqueSet
			}
			if e.lock != nil {
				set = union(set, lockSet{*e.lock: true})
			}
			have := c.carries[e.dst]
			for l := range set {
				if !have[l] {
					if have == nil {
						have = lockSet{}
						c.carries[e.dst] = have
					}
					have[l] = true
					changed = true
				}
			}
		}
	}
}

func union(a, b lockSet) lockSet {
	out := lockSet{}
	for l := range a {
		out[l] = true
	}
	for l := range b {
		out[l] = true
	}
	return out
}

// carriesOf returns the locks the context x carries holds of, as far as
// the pass can tell: with opaque when it cannot (nil for x nil). A struct
// field or a package-level variable may be set anywhere, in other
// packages too: it is opaque, with the holds the package gives it.
func (c *checker) carriesOf(x ast.Expr) lockSet {
	if x == nil {
		return nil
	}
	x = ast.Unparen(x)
	if obj := c.objOf(x); obj != nil {
		if v, ok := obj.(*types.Var); ok && (v.IsField() || v.Pkg() != c.pass.Pkg || v.Parent() == c.pass.Pkg.Scope()) {
			return union(c.carries[obj], opaqueSet) // a field, or a package's variable
		}
		return c.carries[obj]
	}
	if id, ok := x.(*ast.Ident); ok && (id.Name == "nil" || id.Name == "_") {
		return nil
	}
	call, ok := x.(*ast.CallExpr)
	if !ok {
		return opaqueSet
	}
	if lc, ok := c.lockCall(call); ok && lc.role == acquire {
		return union(c.carriesOf(lc.ctxArg), lockSet{lc.lock: true})
	}
	if isContextFunc(c.pass, call) && len(call.Args) > 0 {
		return c.carriesOf(call.Args[0])
	}
	if isBackground(c.pass, call) {
		return nil
	}
	return opaqueSet
}

// check reports the releases of u given a context that carries no hold of
// their lock.
func (c *checker) check(u *unit) {
	for _, lc := range u.calls {
		if lc.role != release || lc.ctxArg == nil {
			continue
		}
		if set := c.carriesOf(lc.ctxArg); set[lc.lock] || set[opaque] {
			continue
		}
		arg := ast.Unparen(lc.ctxArg)
		if isBackground(c.pass, arg) {
			c.pass.ReportRangef(lc.call,
				"redisync: %s.%s is given %s, which carries no hold: it returns ErrNotHeld; give it the context the lock's acquisition returned",
				lc.recv, lc.name, types.ExprString(arg))
			continue
		}
		names, taken := u.acquired[lc.lock]
		if !taken {
			continue // a helper's: the hold is handed in
		}
		hint := "the context the lock's acquisition returned"
		if len(names) > 0 {
			hint = strings.Join(dedup(names), " or ")
		}
		c.pass.ReportRangef(lc.call,
			"redisync: %s.%s is given %s, which is not the hold's context: it returns ErrNotHeld and the lock stays held, renewed, while the context it was taken with lives; give it %s",
			lc.recv, lc.name, types.ExprString(arg), hint)
	}
}

func dedup(s []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// lockCall reports whether call is a call of a method the pass knows, and
// describes it.
func (c *checker) lockCall(call *ast.CallExpr) (lockCall, bool) {
	sel, ok := ast.Unparen(call.Fun).(*ast.SelectorExpr)
	if !ok {
		return lockCall{}, false
	}
	fn, ok := c.pass.TypesInfo.Uses[sel.Sel].(*types.Func)
	if !ok || fn.Pkg() == nil || fn.Pkg().Path() != CorePath {
		return lockCall{}, false
	}
	recv := fn.Signature().Recv()
	if recv == nil {
		return lockCall{}, false
	}
	t := recv.Type()
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	named, ok := t.(*types.Named)
	if !ok {
		return lockCall{}, false
	}
	m, ok := methods[named.Obj().Name()][fn.Name()]
	if !ok {
		return lockCall{}, false
	}
	lc := lockCall{call: call, typ: named.Obj().Name(), name: fn.Name(), role: m.role, recv: types.ExprString(sel.X), lock: c.lockOf(sel.X, m.side)}
	if len(call.Args) > 0 {
		lc.ctxArg = call.Args[0]
	}
	return lc, true
}

// lockOf names the lock whose handle x is.
func (c *checker) lockOf(x ast.Expr, side string) lockID {
	x = ast.Unparen(x)
	if obj := c.objOf(x); obj != nil {
		return lockID{obj: obj, side: side}
	}
	return lockID{text: types.ExprString(x), side: side}
}

// objOf returns the variable or field x names (nil for anything else, _
// included).
func (c *checker) objOf(x ast.Expr) types.Object {
	switch x := ast.Unparen(x).(type) {
	case *ast.Ident:
		if x.Name == "_" {
			return nil
		}
		if v, ok := c.pass.TypesInfo.ObjectOf(x).(*types.Var); ok {
			return v
		}
	case *ast.SelectorExpr:
		if v, ok := c.pass.TypesInfo.ObjectOf(x.Sel).(*types.Var); ok {
			return v
		}
	}
	return nil
}

func isBlank(x ast.Expr) bool {
	id, ok := ast.Unparen(x).(*ast.Ident)
	return ok && id.Name == "_"
}

// isContextFunc reports whether call calls a function of package context
// that returns a context derived from its first argument (WithCancel,
// WithTimeout, WithValue, WithoutCancel, ...).
func isContextFunc(pass *analysis.Pass, call *ast.CallExpr) bool {
	fn := calledFunc(pass, call)
	return fn != nil && fn.Pkg() != nil && fn.Pkg().Path() == "context" && strings.HasPrefix(fn.Name(), "With")
}

// isBackground reports whether x is context.Background() or context.TODO().
func isBackground(pass *analysis.Pass, x ast.Expr) bool {
	call, ok := x.(*ast.CallExpr)
	if !ok {
		return false
	}
	fn := calledFunc(pass, call)
	return fn != nil && fn.Pkg() != nil && fn.Pkg().Path() == "context" && (fn.Name() == "Background" || fn.Name() == "TODO")
}

// calledFunc returns the function or method call calls, or nil.
func calledFunc(pass *analysis.Pass, call *ast.CallExpr) *types.Func {
	var id *ast.Ident
	switch f := ast.Unparen(call.Fun).(type) {
	case *ast.Ident:
		id = f
	case *ast.SelectorExpr:
		id = f.Sel
	default:
		return nil
	}
	fn, _ := pass.TypesInfo.Uses[id].(*types.Func)
	return fn
}
