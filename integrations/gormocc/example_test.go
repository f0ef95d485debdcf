package gormocc_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/glebarez/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/integrations/gormocc"
)

// Two requests read the same row; the second Save, made on a stale copy,
// fails with a conflict instead of undoing the first. gormocc.Update does
// the read-modify-write with retry.
func Example() {
	dir, _ := os.MkdirTemp("", "gormocc")
	defer os.RemoveAll(dir)
	db, err := gorm.Open(sqlite.Open(filepath.Join(dir, "shop.db")), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		panic(err)
	}
	if sqlDB, err := db.DB(); err == nil {
		defer sqlDB.Close()
	}

	type Product struct {
		ID      uint
		Name    string
		Stock   int
		Version gormocc.Version // makes every write conditional
	}
	_ = db.Use(gormocc.Plugin{})
	_ = db.AutoMigrate(&Product{})
	db.Create(&Product{ID: 1, Name: "teapot", Stock: 10})

	var a, b Product
	db.First(&a, 1)
	db.First(&b, 1)
	a.Stock = 9
	fmt.Println("first save:", db.Save(&a).Error)
	b.Name = "kettle"
	err = db.Save(&b).Error
	var conflict *cas.ConflictError
	fmt.Println("stale save is a conflict:", errors.Is(err, cas.ErrConflict), errors.As(err, &conflict) && conflict.Key == "products/1")

	p, err := gormocc.Update(context.Background(), db, Product{ID: 1}, func(p *Product) error {
		p.Name = "kettle" // redone on the current row
		return nil
	})
	fmt.Println(p.Name, p.Stock, err)
	// Output:
	// first save: <nil>
	// stale save is a conflict: true true
	// kettle 9 <nil>
}
