package gormocc

import (
	"context"
	"errors"
	"fmt"

	"gorm.io/gorm"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// Update is a read-modify-write of one row with retry: it reads the row
// whose primary key key holds (key is a model with its primary key set;
// its other fields are ignored), calls mutate on it, and saves it with
// the version check. When another writer saved the row in between, the
// save fails with a conflict and Update reads the row again and calls
// mutate again, as occ.Update does (WithMaxAttempts, backoff, budgets and
// observers are occ's options). It returns the model as saved, with its
// new version.
//
// mutate may run several times and must depend only on the model it gets;
// an error from it ends the loop and is returned as is. A missing row
// fails with an error matching both cas.ErrNotFound and
// gorm.ErrRecordNotFound. db must have the Plugin registered; call Update
// outside a transaction (each attempt is its own).
//
//	item, err := gormocc.Update(ctx, db, Item{ID: 42}, func(it *Item) error {
//		if it.Stock == 0 {
//			return ErrSoldOut // not retried
//		}
//		it.Stock--
//		return nil
//	})
func Update[T any](ctx context.Context, db *gorm.DB, key T, mutate func(m *T) error, opts ...occ.Option) (T, error) {
	var out T
	if _, ok := db.Config.Plugins[Plugin{}.Name()]; !ok {
		return out, errors.New("gormocc: Update needs db.Use(gormocc.Plugin{})")
	}
	err := occ.Retry(ctx, func(ctx context.Context) error {
		m := key
		tx := db.WithContext(ctx)
		if err := tx.Take(&m).Error; err != nil {
			if errors.Is(err, gorm.ErrRecordNotFound) {
				return fmt.Errorf("%w: %w", cas.ErrNotFound, err)
			}
			return err
		}
		if err := mutate(&m); err != nil {
			return err
		}
		if err := tx.Save(&m).Error; err != nil {
			return err
		}
		out = m
		return nil
	}, opts...)
	return out, err
}
