from services.cleaner.main import main

main()
