// Package loomtest builds a loom the size a team's reaches in days, through
// the loom's own → commands, for the tests of every surface that shows or
// runs the loom (the loom package, REST, the loom page, MCP): several
// trees of dozens of nodes written by two people and a model, with
// annotations, bookmarks, links, a document and an open generation
// request in every tree. Bugs that only a loom of this shape shows
// (counters, positions in another tree, requests in another tree) are
// tested on it.
package loomtest

import (
	"fmt"
	"strings"
)

// Runner runs → command lines as one participant and returns the result's
// text: loom.Run for one credential, a REST post, a page form.
type Runner func(commands string) (string, error)

// Who are the participants: Admin plants the trees and sets permissions
// (room authority), Alice and Bob are people, Model is a model agent.
type Who struct {
	Admin, Alice, Bob, Model Runner
	// AliceID, BobID and ModelID are their agent ids, for → permit. An
	// empty id is not permitted (an owner's agent already may everything).
	AliceID, BobID, ModelID string
}

// Tree is one tree of the fixture, as built.
type Tree struct {
	ID   int64
	Name string
	// Nodes is how many nodes it has.
	Nodes int
	// AliceLeaf, BobLeaf and ModelLeaf end the branch each wrote.
	AliceLeaf, BobLeaf, ModelLeaf int64
	// Request is the open generation request the model queued at
	// ModelLeaf ("g2"), which nobody has fulfilled.
	Request string
}

// Fixture is the built loom.
type Fixture struct {
	Trees []Tree
	// Doc is the document every tree's model branch links to.
	Doc string
}

// Nodes is the number of nodes in every tree together.
func (f *Fixture) Nodes() int {
	n := 0
	for _, t := range f.Trees {
		n += t.Nodes
	}
	return n
}

var trees = []struct{ name, root string }{
	{"checkout-launch", "The checkout launch, as the team told it to itself."},
	{"onboarding", "What a new teammate meets on the first morning."},
	{"pricing-notes", "Notes toward the pricing page nobody wants to write."},
}

// Build plants three trees of 22 nodes each: alice writes branch 1 (nodes
// 2–9), bob branches from node 3 (10–16), the model from node 5 (17–22),
// links node 20 to 7 and to the document, and asks for a continuation of
// node 22, left open. Each participant yields its turns when done, and
// ends in the last tree: a person or model standing in tree 3 acting on
// tree 1 is the shape the loom's bugs of position came from.
func Build(w Who) (*Fixture, error) {
	run := func(who Runner, name, cmds string) error {
		if _, err := who(cmds); err != nil {
			return fmt.Errorf("%s: %s: %w", name, strings.SplitN(cmds, "\n", 2)[0], err)
		}
		return nil
	}
	var perms []string
	for _, p := range []struct{ id, what string }{
		{w.AliceID, "human all"}, {w.BobID, "human all"}, {w.ModelID, "model loom_aware loom_write loom_generate doc_read"},
	} {
		if p.id != "" {
			perms = append(perms, "→ permit "+p.id+" "+p.what)
		}
	}
	if len(perms) > 0 {
		if err := run(w.Admin, "admin", strings.Join(perms, "\n")); err != nil {
			return nil, err
		}
	}
	f := &Fixture{Doc: "character notes"}
	if err := run(w.Alice, "alice", `→ write doc:"character notes" append "Maya leads the launch; Raj keeps the numbers honest."`); err != nil {
		return nil, err
	}
	for i, tr := range trees {
		id := int64(i + 1)
		t := Tree{ID: id, Name: tr.name, Nodes: 22, AliceLeaf: 9, BobLeaf: 16, ModelLeaf: 22}
		if err := run(w.Admin, "admin", fmt.Sprintf("→ new tree %q %q", tr.name, tr.root)); err != nil {
			return nil, err
		}
		lines := []string{fmt.Sprintf("→ switch to 1 tree:%d", id)}
		for k := 2; k <= 9; k++ {
			lines = append(lines, fmt.Sprintf("→ add %q", fmt.Sprintf("Alice, %s, step %d: the part of the story where the team decides what comes next and why.", tr.name, k)))
		}
		lines = append(lines, fmt.Sprintf(`→ annotate 4 tree:%d "this is where the tone shifts"`, id), fmt.Sprintf("→ yield tree:%d", id))
		if err := run(w.Alice, "alice", strings.Join(lines, "\n")); err != nil {
			return nil, err
		}
		lines = []string{fmt.Sprintf("→ branch from 3 tree:%d %q", id, "Bob's other telling, from node 3.")}
		for k := 11; k <= 16; k++ {
			lines = append(lines, fmt.Sprintf("→ add %q", fmt.Sprintf("Bob, %s, line %d: a quieter version in which the numbers lead.", tr.name, k)))
		}
		lines = append(lines, fmt.Sprintf(`→ bookmark 12 tree:%d "bob's favourite"`, id), fmt.Sprintf("→ yield tree:%d", id))
		if err := run(w.Bob, "bob", strings.Join(lines, "\n")); err != nil {
			return nil, err
		}
		lines = []string{fmt.Sprintf("→ branch from 5 tree:%d %q", id, "The model's reading, from node 5.")}
		for k := 18; k <= 22; k++ {
			lines = append(lines, fmt.Sprintf("→ add %q", fmt.Sprintf("Model, %s, part %d: what the others left unsaid.", tr.name, k)))
		}
		lines = append(lines, fmt.Sprintf("→ link 20 to 7 tree:%d", id), fmt.Sprintf(`→ link 20 tree:%d to doc:"character notes"`, id),
			fmt.Sprintf("→ continue from 22 tree:%d", id), fmt.Sprintf("→ yield tree:%d", id))
		if err := run(w.Model, "model", strings.Join(lines, "\n")); err != nil {
			return nil, err
		}
		t.Request = fmt.Sprintf("g%d", id)
		f.Trees = append(f.Trees, t)
	}
	return f, nil
}
