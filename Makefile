# Thin aliases for ./dev, which does the real work (and needs no make).
.PHONY: up serve test lint bench docs
up serve:
	./dev up
test:
	./dev test
lint:
	./dev lint
bench:
	./dev bench
docs:
	./dev docs
