package main

import (
	"context"
	"time"
)

// imagePoll is how often a server looks for the images of warm pool
// classes it left out: a read of one small record per image.
const imagePoll = 2 * time.Second

// awaitImages starts the warm pool classes that were left out because
// their image was not here, as each image arrives (make run builds the
// python image in the background; an operator may build or import one).
// It returns when every such class has started, or ctx ends.
func (d *daemon) awaitImages(ctx context.Context) {
	var waiting []string
	for _, name := range d.pool.Waiting() {
		if _, err := d.local.images.Resolve(name); err != nil {
			waiting = append(waiting, name)
			if d.local.images.Building(name) {
				d.log.Info("a warm pool class waits for its image, which is being built", "image", name,
					"build_log", d.local.images.LogPath(name))
			}
		}
	}
	if len(waiting) == 0 {
		return
	}
	tick := time.NewTicker(imagePoll)
	defer tick.Stop()
	for len(waiting) > 0 {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		left := waiting[:0]
		for _, name := range waiting {
			if _, err := d.local.images.Resolve(name); err != nil {
				left = append(left, name)
				continue
			}
			d.log.Info("image arrived: its warm pool classes start", "image", name)
			for _, err := range d.pool.AddImage(ctx, name) {
				d.log.Warn("warm pool class left out", "err", err)
			}
		}
		waiting = left
	}
}
