// Package migrate holds the code of docs/migrate.md, "replace a lock in
// repository code": for each lock a team runs (a Redis SET NX lock,
// SELECT ... FOR UPDATE, pg_advisory_lock, an etcd mutex), the function as
// it is written with the lock (BuyRedisLocked, BuyForUpdate,
// BuyAdvisoryLocked, BuyEtcdMutex) and as it is written with occkit (Buy
// on any store, BuyVersioned for a table of your own). Its tests run the
// occkit versions with concurrent buyers on the real servers and check that
// nothing is lost. The GORM before/after is in
// integrations/gormocc (its Example and tests).
//
// Every function sells one unit of a SKU's stock, or fails with
// ErrSoldOut.
package migrate
