-- 0033_reserved: the number another branch's migration takes; nothing here. Drop this file when that
-- migration lands (migrations are numbered without gaps).
SELECT 1;
